"""A member of a job's consumer group frozen past the session timeout (SIGSTOP) loses its tasks;
when it comes back (SIGCONT) it writes nothing for them: no output, no changelog entry, no
checkpoint that counts. It says in one line that it was fenced, and joins again (tansu on
127.0.0.1, real processes, stores in LMDB with changelog topics)."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

from group_helpers import (
    SESSION_MS,
    Member,
    final_counts,
    outputs,
    settled,
    timed_records,
    topics_named,
    wait_for,
)
from kafka_helpers import create_topic, keyed, produce_each, run

from runtime.engine import checkpoints


def _feed(bootstrap: str, topic: str, n: int, stop: threading.Event) -> None:
    """``n`` events over 20 keys, 40 at a time every 0.25 s: input flows all along the test."""
    events = keyed(((f"k{i % 20}", {"i": i}) for i in range(n)), 4)
    for start in range(0, n, 40):
        if stop.is_set():
            return
        run(produce_each(bootstrap, topic, events[start:start + 40]))
        time.sleep(0.25)


def test_a_frozen_member_that_comes_back_writes_nothing_for_its_moved_tasks_and_rejoins(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """"After the new owner has started" is from when the new owner claimed the task in its
    checkpoint (before it read an input of the task) on; the frozen member is let go on only
    after that. From then on, none of its writes for the task counts: every checkpoint of the
    task a reader takes moves forward, every changelog entry of the task is the new owner's
    (counts per key never go down), and no output it writes repeats an event another member
    processed."""
    tag = uuid.uuid4().hex[:8]
    topic = f"gevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, 4))
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag, delay=0.01)
               for i in range(3)]
    n = 1600
    stop_feed = threading.Event()
    feeder = threading.Thread(target=_feed, args=(kafka_bootstrap, topic, n, stop_feed))
    lost = members[0]
    try:
        wait_for("three members split the tasks", lambda: settled(members, 4), 60, members)
        lost = next(m for m in members if len(m.assignment()[1]) == 1)  # type: ignore[index]
        moved = lost.assignment()[1][0]  # type: ignore[index]
        index = int(moved.split()[-1])
        survivors = [m for m in members if m is not lost]
        feeder.start()
        wait_for("the member to be frozen has counted some events",
                 lambda: sum(o[2] == lost.pid for o in outputs(kafka_bootstrap, tag)) >= 20,
                 60, members)
        lost.signal(signal.SIGSTOP)
        wait_for("the survivors run every task", lambda: settled(survivors, 4),
                 SESSION_MS / 1000 + 20, survivors)
        took_over = int(time.time() * 1000)
        taken = survivors[0].assignment()[0]  # type: ignore[index]
        owner = next(m for m in survivors if moved in m.assignment()[1])  # type: ignore[index]
        cp_topic = topics_named(kafka_bootstrap, "__samza_checkpoint_", tag)[0]

        def claimed() -> bool:
            """The new owner wrote the task's checkpoint (it names its writer)."""
            recs = [r for r in timed_records(kafka_bootstrap, cp_topic)
                    if r[3] == moved.encode() and r[4] and r[2] >= took_over]
            return any(checkpoints.decode(r[4]).get(  # type: ignore[arg-type]
                "member", f"pid-{owner.pid} ").startswith(f"pid-{owner.pid} ") for r in recs)
        wait_for("the new owner claimed the task", claimed, 30, survivors)
        wait_for("the new owner counts the task's events", lambda: any(
            o[2] == owner.pid for o in outputs(kafka_bootstrap, tag)
            if int(o[0][1:]) % 20 in _keys_of(index)), 30, survivors)
        resumed = time.time()
        lost.signal(signal.SIGCONT)
        wait_for("the frozen member says it was fenced", lambda: "fenced out of the group"
                 in lost.text(), 30, members)
        wait_for("it joins again and the three split the tasks", lambda: settled(members, 4)
                 and lost.assignment()[0] > taken, 60, members)  # type: ignore[index]
        feeder.join(120)
        wait_for("every event is counted", lambda: final_counts(outputs(kafka_bootstrap, tag))
                 == dict(Counter(f"k{i % 20}" for i in range(n))), 120, members)
        after = int(resumed * 1000)

        # the task's checkpoint, as a reader takes it, only moves forward after the takeover
        seen: dict[str, object] | None = None
        offsets = []
        for _p, _o, ts, key, value in timed_records(kafka_bootstrap, cp_topic):
            if key != moved.encode() or not value:
                continue
            data = checkpoints.decode(value)
            # a reader's rule: a record of a lower epoch than the one before it is ignored
            if seen is None or data.get("epoch", 0) >= seen.get("epoch", 0):  # type: ignore[attr-defined, operator]
                seen = data
                if ts >= after:
                    offsets.append((sum(checkpoints.offsets_of(data).values()),
                                    data.get("member")))
        assert offsets and [o for o, _ in offsets] == sorted(o for o, _ in offsets), offsets

        # every changelog entry of the task after it came back: counts per key never go down
        changelog = topics_named(kafka_bootstrap, tag, "counts-changelog")[0]
        last: dict[bytes, int] = {}
        for p, _o, ts, key, value in timed_records(kafka_bootstrap, changelog):
            if p != index or key is None or value is None:
                continue
            count = json.loads(value)
            if ts >= after:
                assert count >= last.get(key, 0), (key, count, last.get(key))
            last[key] = count

        # no output of the frozen member after it came back repeats another member's work
        by_event: dict[int, set[int]] = {}
        for o in outputs(kafka_bootstrap, tag):
            by_event.setdefault(o[3], set()).add(o[2])
        late = [r for r in timed_records(kafka_bootstrap, f"gout-{tag}")
                if r[2] >= after and json.loads(r[4])[1] == lost.pid]  # type: ignore[arg-type]
        repeated = [json.loads(r[4]) for r in late  # type: ignore[arg-type]
                    if len(by_event[json.loads(r[4])[2]]) > 1]  # type: ignore[arg-type]
        assert not repeated, repeated[:10]
        fenced = [line for line in lost.text().splitlines() if "fenced out of the group" in line]
        assert len(fenced) == 1 and moved in fenced[0], fenced
    finally:
        stop_feed.set()
        if feeder.ident is not None:
            feeder.join(120)
        codes = [m.stop() for m in members]
    assert codes == [0, 0, 0], [m.text()[-2000:] for m in members]


def _keys_of(index: int) -> set[int]:
    """The key numbers (of k0..k19) whose events go to input partition ``index``."""
    from kafka_helpers import partition_for
    return {k for k in range(20) if partition_for(f"k{k}".encode(), 4) == index}
