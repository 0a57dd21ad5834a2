"""A window after ``partition_by`` in the consumer group (``job.coordinator=kafka``), exactly
once: the panes a read_committed reader gets are the model's, each once, with one member and
with two members of which one is killed (SIGKILL) while input flows.

The bug this pins: under exactly-once each task writes through a producer of its own, made
when the task comes to the member, before the member learns its run's generation. Its control
records (the watermarks it sends down the intermediate stream) carried the generation it was
made with, the downstream tasks skipped them as records of an earlier run, and the window
never closed a pane: zero outputs, silently."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from group_helpers import SESSION_MS, Member, settled, wait_for
from kafka_helpers import create_topic, keyed, produce_each, run
from test_kafka_exactly_once import committed_records

from operators.hashing import partition_for

EOS = ("-c", "job.processing.guarantee=exactly-once")
USERS = 24
#: event time far past every event: one per input partition closes every pane before it
FLUSH_TS = 1_000_000.0


def _events(n: int) -> list[tuple[str, dict[str, Any]]]:
    """``n`` events in event-time order, a quarter second apart, over ``USERS`` users."""
    return [(f"u{i % USERS}", {"user": f"u{i % USERS}", "ts": 1000.0 + i * 0.25})
            for i in range(n)]


def _model(events: list[tuple[str, dict[str, Any]]]) -> Counter[tuple[str, str, int]]:
    """The panes of a 10 s tumbling window per user: (user, pane id, count), each once."""
    panes: Counter[tuple[str, str]] = Counter()
    for user, v in events:
        panes[(user, str(int(v["ts"] // 10) * 10_000))] += 1
    return Counter((u, start, n) for (u, start), n in panes.items())


def _flush_keys() -> list[str]:
    """A key of every input partition (of the 4)."""
    keys: dict[int, str] = {}
    i = 0
    while len(keys) < 4:
        keys.setdefault(partition_for(f"flush{i}".encode(), 4), f"flush{i}")
        i += 1
    return list(keys.values())


def _feed(bootstrap: str, topic: str, events: list[tuple[str, dict[str, Any]]],
          stop: threading.Event | None = None) -> None:
    records = keyed(events, 4)
    for start in range(0, len(records), 60):
        if stop is not None and stop.is_set():
            return
        run(produce_each(bootstrap, topic, records[start:start + 60]))
        time.sleep(0.2)


def _committed_panes(bootstrap: str, tag: str) -> Counter[tuple[str, str, int]]:
    """(user, pane id, count) of each pane a read_committed reader gets, by the log's markers."""
    out: Counter[tuple[str, str, int]] = Counter()
    for k, v in committed_records(bootstrap, f"gwout-{tag}", 2):
        if k is not None and v is not None:
            d = json.loads(v)
            out[(k.decode(), d["start"], d["n"])] += 1
    return out


def _run(tmp_path: Path, kafka_bootstrap: str, members: int, kill: bool) -> None:
    bs = kafka_bootstrap
    tag = uuid.uuid4().hex[:8]
    topic = f"gwevents-{tag}"
    run(create_topic(bs, topic, 4))
    events = _events(1200)
    model = _model(events)
    ms = [Member(tmp_path / f"m{i}", bs, tag, *EOS, app="window") for i in range(members)]
    try:
        wait_for("the group settled", lambda: settled(ms, 4), 60, ms)
        half = len(events) // 2
        _feed(bs, topic, events[:half])
        if kill:
            ms[0].kill()
            time.sleep(SESSION_MS / 1000 / 2)  # input flows while the group notices
        _feed(bs, topic, events[half:])
        _feed(bs, topic, [(k, {"user": k, "ts": FLUSH_TS}) for k in _flush_keys()])
        live = [m for m in ms if m.alive()]
        try:
            wait_for("every pane of the model committed",
                     lambda: set(_committed_panes(bs, tag)) >= set(model), 90, live)
        except AssertionError as exc:
            got = _committed_panes(bs, tag)
            raise AssertionError(f"{exc}\n{len(got)} of {len(model)} panes; missing "
                                 f"{sorted(model - got)[:8]}, extra {sorted(got - model)[:8]}"
                                 ) from None
        time.sleep(1.0)  # a duplicate would come with a later commit
        got = _committed_panes(bs, tag)
        twice = {p: n for p, n in got.items() if n > 1}
        assert not twice, f"panes committed more than once: {list(twice.items())[:5]}"
        assert got == model, (f"missing {list((model - got).items())[:5]}, "
                              f"extra {list((got - model).items())[:5]}")
        for m in live:
            assert m.stop() == 0, m.text()[-3000:]
    finally:
        for m in ms:
            if m.alive():
                m.kill()


def test_one_member_exactly_once_window_after_partition_by(kafka_bootstrap: str,
                                                           tmp_path: Path) -> None:
    _run(tmp_path, kafka_bootstrap, 1, kill=False)


def test_two_members_one_killed_exactly_once_window_after_partition_by(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    _run(tmp_path, kafka_bootstrap, 2, kill=True)
