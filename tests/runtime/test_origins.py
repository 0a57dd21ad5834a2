"""``runtime.engine.origins``: the rule by which a task skips replayed records of an
intermediate stream (docs/semantics.md, "Replays applied once"), piece by piece."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.msgpack import encode as msgpack_encode

from runtime.engine.handout import Batch, Cursor, Handout
from runtime.engine.job import SSP
from runtime.engine.origins import (
    OFFSET_BITS,
    ORIGIN_HEADER,
    ORIGIN_IDS,
    REPLAYED,
    Applied,
    OriginNames,
    Stamps,
    _apply,
    _apply_each,
    decode_origins,
    origin_key,
    take_batch,
)

Q = SSP("hop", 0)


def _batch(first: int, origins: list[Any]) -> tuple[Batch, list[Any]]:
    return Batch(Q, first, [f"m{first + i}" for i in range(len(origins))]), origins


def test_in_order_records_are_skipped_at_or_below_the_last_applied() -> None:
    applied = Applied(REPLAYED, {})
    b, o = _batch(0, [["in/0", 5, 0], ["in/0", 5, 1], ["in/1", 2, 0], ["in/0", 6, 0]])
    applied.decide(b, o)
    assert REPLAYED not in b.payloads
    # the upstream task of in/0 restarted from its checkpoint at 4: 5/0, 5/1, 6/0 again, then 7/0
    b2, o2 = _batch(4, [["in/0", 5, 0], ["in/0", 5, 1], ["in/0", 6, 0], ["in/0", 7, 0],
                        ["in/1", 2, 0], ["in/1", 3, 0], None])
    applied.decide(b2, o2)
    assert b2.payloads == [REPLAYED, REPLAYED, REPLAYED, "m7", REPLAYED, "m9", "m10"]
    assert applied.replays == 4


def test_records_with_floors_are_skipped_by_floor_or_by_pair() -> None:
    applied = Applied(REPLAYED, {})
    # out of order (an async step upstream): 7 before 6, the floor says all up to 4 completed
    b, o = _batch(0, [["in/0", 7, 0, 4], ["in/0", 6, 0, 4], ["in/0", 8, 0, 6]])
    applied.decide(b, o)
    assert REPLAYED not in b.payloads
    b2, o2 = _batch(3, [["in/0", 5, 0, 4], ["in/0", 6, 0, 4], ["in/0", 7, 0, 4],
                        ["in/0", 9, 0, 6]])
    applied.decide(b2, o2)  # 5 and 6 are under the floor 6; 7 was applied; 9 is new
    assert b2.payloads == [REPLAYED, REPLAYED, REPLAYED, "m6"]


def test_a_checkpoint_inside_a_decided_batch_records_only_what_it_covers() -> None:
    done: dict[SSP, int] = {}
    applied = Applied(REPLAYED, done)
    b, o = _batch(10, [["in/0", 1, 0], ["in/0", 2, 0], ["in/0", 3, 0]])
    applied.decide(b, o)
    done[Q] = 10  # the task handed out offset 10 only when it committed
    snap = applied.snapshot(done)
    assert snap == {"hop/0": {"in/0": [1, 0]}}
    # restored from that checkpoint, offsets 11 and 12 come again and are applied, not skipped
    again = Applied(REPLAYED, {})
    again.load(snap)
    b2, o2 = _batch(11, [["in/0", 2, 0], ["in/0", 3, 0]])
    again.decide(b2, o2)
    assert REPLAYED not in b2.payloads
    done[Q] = 12
    assert applied.snapshot(done) == {"hop/0": {"in/0": [3, 0]}}


def test_a_checkpoint_before_any_record_of_a_decided_batch_records_none_of_it() -> None:
    """A task took a batch of a partition it has completed nothing of yet (no offset in its
    checkpoint: it starts there, or a commit came before its first message of it completed):
    the checkpoint holds none of that batch as applied, so a restart from it applies the
    records, not skips them."""
    done: dict[SSP, int] = {}
    applied = Applied(REPLAYED, done)
    b, o = _batch(0, [["in/0", 1, 0], ["in/0", 2, 0]])
    applied.decide(b, o)
    snap = applied.snapshot(done)
    assert snap.get("hop/0", {}) == {}
    again = Applied(REPLAYED, {})
    again.load(snap)
    b2, o2 = _batch(0, [["in/0", 1, 0], ["in/0", 2, 0]])
    again.decide(b2, o2)
    assert REPLAYED not in b2.payloads


def test_a_snapshot_with_pairs_reads_back() -> None:
    applied = Applied(REPLAYED, {})
    b, o = _batch(0, [["in/0", 7, 0, 4], ["in/0", 9, 1, 4]])
    applied.decide(b, o)
    snap = applied.snapshot({Q: 1})
    again = Applied(REPLAYED, {})
    again.load(snap)
    b2, o2 = _batch(2, [["in/0", 9, 1, 4], ["in/0", 9, 0, 4], ["in/0", 3, 0, 4]])
    again.decide(b2, o2)
    assert b2.payloads == [REPLAYED, "m3", REPLAYED]


def test_stamps_name_the_message_and_count_its_records() -> None:
    src = Cursor()
    src.batch = Batch(SSP("in", 3), 100, ["a", "b"])
    done: dict[SSP, int] = {}
    stamps = Stamps({SSP("in", 3): origin_key(SSP("in", 3))}, lambda: None, object(), src, done,
                    ordered=True)
    assert stamps.header() is None  # not handing out: a window's firing, a timer
    stamps.live = True
    src.index = 1
    heads = [stamps.header(), stamps.header()]
    src.index = 2
    heads.append(stamps.header())
    assert all(h is not None and h[0][0] == ORIGIN_HEADER for h in heads)
    assert decode_origins([*heads, None]) == [["in/3", 100, 0], ["in/3", 100, 1],
                                              ["in/3", 101, 0], None]
    # a message that goes on asynchronously counts on from what it wrote while handed out
    rec = Handout(SSP("in", 3), 101, False, 0.0, None)
    stamps.went_async(rec)
    async_stamps = Stamps({}, lambda: rec, object(), src, done, ordered=False)
    done[SSP("in", 3)] = 99
    assert decode_origins([async_stamps.header()]) == [["in/3", 101, 1, 99]]
    assert origin_key(SSP("in", 3), 1, 4) == "in/3/1of4"


def test_a_decoded_batch_gives_its_records_origins_and_control_records_between_them() -> None:
    from runtime.engine.codec import StreamCodec, control_record
    from runtime.engine.origins import OriginList
    from runtime.engine.records import Watermark
    from samza_dsl import KV
    from samza_dsl.serdes import KVSerde, SafeSerde

    codec = StreamCodec("hop", KVSerde(SafeSerde(), SafeSerde()))
    codec.origins = True
    src = Cursor()
    src.batch = Batch(SSP("in", 0), 40, [None] * 30)
    stamps = Stamps({}, lambda: None, object(), src, {}, ordered=True)
    stamps.live = True
    records = []
    for i in range(30):
        src.index = i + 1
        k, v, _ = codec.encode(KV(f"k{i}", {"n": i}))
        records.append((k, v, stamps.header()))
        if i == 14:
            records.append(control_record(Watermark("t0", 5), 1))
    out = codec.decode_batch(SSP("hop", 0), 0, records, 1)
    assert isinstance(out, OriginList)
    assert out[15] == Watermark("t0", 5) and out.origins[15] is None
    data = [m for m in out if isinstance(m, KV)]
    assert data == [KV(f"k{i}", {"n": i}) for i in range(30)]
    assert [o[1] for o in out.origins if o is not None] == list(range(40, 70))
    codec.origins = False  # a stream that is not intermediate gives a plain list
    assert type(codec.decode_batch(SSP("hop", 0), 0, records, 1)) is list


def test_a_batch_with_a_control_record_decodes_each_record_once() -> None:
    """A control record mid-batch (a watermark between two flushes) is found before any record
    is decoded, so the records before it are not decoded twice."""
    from runtime.engine.codec import StreamCodec, control_record
    from runtime.engine.records import Watermark
    from samza_dsl import KV
    from samza_dsl.serdes import KVSerde, SafeSerde

    values = SafeSerde()
    decoded: list[bytes] = []
    decode = values._decode

    def counted(data: bytes) -> Any:
        decoded.append(data)
        return decode(data)

    values._decode = counted
    codec = StreamCodec("hop", KVSerde(SafeSerde(), values))
    records = [codec.encode(KV(f"k{i}", {"n": i})) for i in range(40)]
    records[30:30] = [control_record(Watermark("t0", 5), 1)]
    out = codec.decode_batch(SSP("hop", 0), 0, records, 1)
    assert out[30] == Watermark("t0", 5)
    assert [m for m in out if isinstance(m, KV)] == [KV(f"k{i}", {"n": i}) for i in range(40)]
    assert len(decoded) == 40  # each data record's value once


_origin = st.one_of(
    st.none(),
    st.tuples(st.sampled_from(["in/0", "in/1", "in/2/0of2"]), st.integers(0, 40),
              st.sampled_from([0, 0, 0, 1])).map(list),
    st.tuples(st.sampled_from(["in/0", "in/3"]), st.integers(0, 40), st.integers(0, 1),
              st.integers(-1, 40)).map(list))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_origin, max_size=30), max_size=6),
       st.lists(st.tuples(st.sampled_from(["in/0", "in/1", "in/2/0of2"]), st.integers(0, 12),
                          st.integers(0, 60), st.integers(0, 60)), max_size=3))
def test_runs_decide_as_record_by_record_does(batches: list[list[Any]],
                                              runs: list[tuple[str, int, int, int]]) -> None:
    """The decision by runs (in-order origins, one record a message) marks the same replays
    and leaves the same state as the rule applied record by record; ``runs`` adds long
    in-order runs of one origin, each with a restart (its upstream task replayed from ``back``)
    inside it."""
    for key, lo, n, back in runs:
        batches.append([[key, off, 0] for off in [*range(lo, lo + n), *range(back, back + n)]])
        # the next batch starts again at the last record applied (a checkpoint just before it)
        batches.append([[key, off, 0] for off in range(max(back + n - 1, 0), back + n + 9)])
        # then runs beyond what was applied, between control records, and one of a new origin
        batches.append([*[[key, off, 0] for off in range(back + n + 9, back + n + 20)], None,
                        *[[key, off, 0] for off in range(back + n + 30, back + n + 40)],
                        None, *[["in/2/0of2", lo + off, 0] for off in range(9)]])
    by_runs: dict[str, list[Any]] = {}
    one_by_one: dict[str, list[Any]] = {}
    compact: dict[str, list[Any]] = {}  # the embedded log's form where it applies
    ids = {"in/0": 1, "in/1": 2, "in/2/0of2": 3}
    names = OriginNames(lambda: {i: k for k, i in ids.items()})
    for origins in batches:
        a = [f"m{i}" for i in range(len(origins))]
        b, c = list(a), list(a)
        small = [(ids[o[0]] << OFFSET_BITS) + o[1]
                 if o is not None and len(o) == 3 and o[2] == 0 and o[0] in ids else o
                 for o in origins]
        n = _apply(by_runs, origins, a, REPLAYED)
        assert n == _apply_each(one_by_one, origins, 0, len(origins), b, REPLAYED)
        assert n == _apply(compact, small, c, REPLAYED, names)
        assert a == b == c
        assert by_runs == one_by_one == compact


def test_the_embedded_log_keeps_origins_compactly_and_names_them(tmp_path: Any) -> None:
    """On the embedded log, a record of a one-to-one step in order carries its origin as one
    int (its origin key's id, given once by the log, and its offset) in place of headers: it is
    stored and read as it is, decoded with its key's name, decided as the header form is, and
    a bad record's origin is named from it."""
    from runtime.engine.codec import StreamCodec
    from runtime.local.log import LocalLog
    from samza_dsl import KV
    from samza_dsl.errors import SerdeError
    from samza_dsl.serdes import KVSerde, SafeSerde

    with LocalLog(tmp_path / "log") as log:
        ids = log.assign_ids(ORIGIN_IDS, ["in/0", "in/1"])
        assert sorted(ids.values()) == [1, 2]
        assert log.assign_ids(ORIGIN_IDS, ["in/1", "in/2"]) == {"in/1": ids["in/1"], "in/2": 3}
        codec = StreamCodec("hop", KVSerde(SafeSerde(), SafeSerde()))
        codec.origins = True
        codec.origin_names = OriginNames(lambda: {
            int(v): k[len(ORIGIN_IDS):] for k, v in log.meta_items(ORIGIN_IDS).items()})
        log.create("hop", 1)
        base = ids["in/1"] << OFFSET_BITS
        records: list[Any] = [(*codec.encode(KV(f"k{i}", i))[:2], base + 40 + i)
                              for i in range(20)]
        log.append_many({("hop", 0): records})
        first, got = log.read("hop", 0, 0, 100)
        assert [r[2] for r in got] == [r[2] for r in records]
        out = codec.decode_batch(SSP("hop", 0), first, got, 1)
        assert [m for m in out[:20]] == [KV(f"k{i}", i) for i in range(20)]
        assert out.origins[:2] == [base + 40, base + 41]  # type: ignore[attr-defined]
        applied = Applied(REPLAYED, {})
        b = Batch(SSP("hop", 0), first, out)
        take_batch(applied, b)
        assert applied.origin_of(SSP("hop", 0), 3) == ["in/1", 43, 0]
        assert applied.snapshot({SSP("hop", 0): 19}) == {"hop/0": {"in/1": [59, 0]}}
        # a replay of the first ten, in the compact form, is skipped
        again = codec.decode_batch(SSP("hop", 0), 20, got[:10], 1)
        b2 = Batch(SSP("hop", 0), 20, again)
        take_batch(applied, b2)
        assert b2.payloads == [REPLAYED] * 10
        # a record that does not decode is named by its origin
        with pytest.raises(SerdeError, match="written for the message at stream 'in' "
                                             "partition 1 offset 60"):
            codec.decode_batch(SSP("hop", 0), 30, [(b"\xff", b"\xc1", base + 60)], 1)


_head = st.one_of(
    st.none(),
    st.integers(0, 3).map(lambda i: (i << OFFSET_BITS) + 7),
    _origin.filter(lambda o: o is not None).map(lambda o: ((ORIGIN_HEADER, msgpack_encode(o)),)),
    st.just((("samza.control", b"\x92\x01\x02"),)),
    st.just(((ORIGIN_HEADER, b"\xc1"),)))  # an origin header that does not decode


@settings(max_examples=300, deadline=None)
@given(st.lists(_head, min_size=1, max_size=40))
def test_a_batch_decodes_the_origins_its_records_decode_to_one_by_one(heads: list[Any]
                                                                       ) -> None:
    """``decode_origins`` of a batch (most of it in the compact form, or not) gives what each
    record's headers give alone."""
    got = decode_origins(heads)
    alone = [decode_origins([h]) if h is not None else None for h in heads]
    want = [None if a is None else a[0] for a in alone]
    assert (got if got is not None else [None] * len(heads)) == want
