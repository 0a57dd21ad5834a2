"""A standby's replica read for an interactive query (``runtime.state.views.replica_get``): the
committed value of a key in a real LMDB replica, with the changelog offset it holds up to; in a
table with a ttl an expired entry is not found, on processing time and on event time."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from operators.state import decode_key, encode_key
from runtime.state.lmdb_store import LmdbStore
from runtime.state.ttl import ttl_codec
from runtime.state.views import replica_get
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.spec import TableSpec

SERDE = KVSerde(StringSerde(), JsonSerde())


def _replica(path: Path, ttl: bool) -> tuple[LmdbStore, Any]:
    ve, vd = JsonSerde().serialize, JsonSerde().deserialize
    if ttl:
        ve, vd = ttl_codec(ve, vd)
    store = LmdbStore.open_replica(path, name="sessions", task="Partition 0",
                                   key_encode=encode_key, key_decode=decode_key,
                                   value_encode=ve, value_decode=vd)
    return store, ve


def test_a_replica_answers_its_committed_value_and_offset(tmp_path: Path) -> None:
    store, ve = _replica(tmp_path / "plain", ttl=False)
    try:
        store.replicate([0, 1], [(encode_key("a"), ve({"n": 1})), (encode_key("b"), ve(2))], 2)
        assert replica_get(store, encode_key("a")) == (True, {"n": 1}, 2)
        store.replicate([2], [(encode_key("a"), None)], 7)  # a tombstone
        assert replica_get(store, encode_key("a")) == (False, None, 7)
        assert replica_get(store, encode_key("b")) == (True, 2, 7)
    finally:
        store.close()


def test_an_expired_entry_of_a_ttl_table_is_not_found_in_a_replica(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    spec = TableSpec("sessions", SERDE, ttl_ms=10_000)
    store, ve = _replica(tmp_path / "wall", ttl=True)
    try:
        store.replicate([0, 1], [(encode_key("old"), ve((now - 20_000, "x"))),
                                 (encode_key("new"), ve((now, "y")))], 2)
        assert replica_get(store, encode_key("old"), spec) == (False, None, 2)
        assert replica_get(store, encode_key("new"), spec) == (True, "y", 2)
        # without the spec the same bytes would give the stored pair: the ttl is what hides it
        assert replica_get(store, encode_key("old")) == (True, (now - 20_000, "x"), 2)
    finally:
        store.close()
    # event time: "now" is the largest write time the replica holds
    spec = TableSpec("sessions", SERDE, ttl_ms=10_000, ttl_event_time=lambda v: v["ts"])
    store, ve = _replica(tmp_path / "event", ttl=True)
    try:
        store.replicate([0, 1, 2], [(encode_key("a"), ve((1_000, {"ts": 1}))),
                                    (encode_key("b"), ve((5_000, {"ts": 5}))),
                                    (encode_key("c"), ve((12_000, {"ts": 12})))], 3)
        assert replica_get(store, encode_key("a"), spec) == (False, None, 3)  # 1 s + 10 <= 12
        assert replica_get(store, encode_key("b"), spec) == (True, {"ts": 5}, 3)
    finally:
        store.close()
