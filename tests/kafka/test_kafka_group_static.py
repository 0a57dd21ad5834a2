"""A static member of a job's consumer group (``--container-id``, a ``group_instance_id``)
restarted within the session timeout moves no task: the others keep theirs and it gets its own
back (tansu on 127.0.0.1, real processes)."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

from group_helpers import _RUNS as RUNS
from group_helpers import Member, final_counts, outputs, settled, wait_for
from kafka_helpers import create_topic, keyed, produce_each, run

#: long enough for a process to start again within it
SESSION_S = 10
SETTINGS = ("-c", f"systems.kafka.consumer.session.timeout.ms={SESSION_S * 1000}",
            "-c", "systems.kafka.consumer.heartbeat.interval.ms=500")


def _events(start: int, n: int) -> list[tuple[int, bytes | None, bytes | None]]:
    return keyed(((f"k{i % 30}", {"i": i}) for i in range(start, start + n)), 6)


def _expected(n: int) -> dict[str, int]:
    return dict(Counter(f"k{i % 30}" for i in range(n)))


def _assignments(m: Member) -> list[tuple[int, list[str]]]:
    """Every assignment the member logged: (generation, active tasks)."""
    out = []
    for line in m.text().splitlines():
        found = RUNS.search(line)
        if found:
            out.append((int(found.group(1)), found.group(2).split(", ")))
    return out


def _member(tmp_path: Path, bootstrap: str, tag: str, i: int) -> Member:
    return Member(tmp_path / f"host-{i}", bootstrap, tag, *SETTINGS, "--container-id", str(i))


def test_a_static_member_restarted_within_the_session_timeout_moves_no_task(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """Each of three static members in turn (so the group's leader too) stops (SIGTERM for the
    first, SIGKILL for the others) and starts again at once: it gets its own tasks back, and
    the others never give up or take a task; the counts stay exact."""
    tag = uuid.uuid4().hex[:8]
    topic = f"gevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, 6))
    members = [_member(tmp_path, kafka_bootstrap, tag, i) for i in range(3)]
    try:
        wait_for("three members split the six tasks", lambda: settled(members, 6), 90, members)
        before = [m.assignment() for m in members]
        shares = [set(a[1]) for a in before if a is not None]
        assert [len(s) for s in shares] == [2, 2, 2], shares
        run(produce_each(kafka_bootstrap, topic, _events(0, 120)))
        wait_for("the first events are counted", lambda: final_counts(outputs(
            kafka_bootstrap, tag)) == _expected(120), 60, members)
        first_logs = [m for m in members]
        restarted_at = 0.0
        for i in range(3):
            if i == 0:
                assert members[i].stop() == 0, members[i].text()[-3000:]
            else:
                members[i].kill()
            members[i] = _member(tmp_path, kafka_bootstrap, tag, i)
            restarted_at = time.monotonic()
            wait_for(f"restarted member {i} runs its tasks", lambda i=i: members[i].assignment(),
                     60, members)
            got = members[i].assignment()
            assert got is not None and set(got[1]) == shares[i], (shares, got)
        # past the session timeout: a rebalance that would move tasks has happened by now
        time.sleep(max(0.0, restarted_at + SESSION_S + 3 - time.monotonic()))
        after = [m.assignment() for m in members]
        assert [set(a[1]) for a in after if a is not None] == shares, (before, after)
        # no member ever gave up or took a task: every assignment each process logged since the
        # group settled is its own (before it, the first to join may have held all: Apache
        # Kafka forms a group with the members there, without waiting, in the test bed)
        settled_at = min(a[0] for a in before if a is not None)
        for m, share in [*zip(first_logs, shares, strict=True), *zip(members, shares,
                                                                        strict=True)]:
            logged = [(g, tasks) for g, tasks in _assignments(m) if g >= settled_at]
            assert logged and all(set(tasks) == share for _, tasks in logged), m.text()[-3000:]

        run(produce_each(kafka_bootstrap, topic, _events(120, 120)))
        wait_for("every event is counted", lambda: final_counts(outputs(kafka_bootstrap, tag))
                 == _expected(240), 60, members)
        outs = outputs(kafka_bootstrap, tag)
        assert {o[3] for o in outs} == set(range(240))
        assert {o[2] for o in outs if o[3] >= 120} == {m.pid for m in members}
    finally:
        codes = [m.stop() for m in members]
    assert codes == [0, 0, 0], [m.text()[-2000:] for m in members]
