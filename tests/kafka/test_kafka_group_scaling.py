"""Scaling a job's consumer group (tansu on 127.0.0.1, real ``samza-dsl run --follow``
processes): a member that joins takes only the tasks balance asks for; a member stopped with
SIGTERM commits and hands its tasks over, so nothing is processed twice."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

from group_helpers import Member, final_counts, outputs, settled, wait_for
from kafka_helpers import create_topic, keyed, produce_each, run


def _events(n: int, partitions: int) -> list[tuple[int, bytes | None, bytes | None]]:
    return keyed(((f"k{i % 40}", {"i": i}) for i in range(n)), partitions)


def _shares(members: list[Member]) -> list[set[str]]:
    return [set(m.assignment()[1]) for m in members]  # type: ignore[index]


def test_a_fourth_member_takes_only_the_tasks_balance_asks_for(kafka_bootstrap: str,
                                                                tmp_path: Path) -> None:
    """Eight tasks on three members (3, 3, 2); a fourth joins: it gets two tasks, one from each
    member that had three, and every other task stays where it was (2, 2, 2, 2)."""
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 8))
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag) for i in range(3)]
    try:
        wait_for("three members split the tasks", lambda: settled(members, 8), 60, members)
        before = _shares(members)
        assert sorted(len(s) for s in before) == [2, 3, 3], before
        run(produce_each(kafka_bootstrap, f"gevents-{tag}", _events(160, 8)))
        members.append(Member(tmp_path / "host-3", kafka_bootstrap, tag))
        wait_for("four members split the tasks", lambda: settled(members, 8), 60, members)
        after = _shares(members)
        assert [len(s) for s in after] == [2, 2, 2, 2], after
        moved = sum(len(b - a) for b, a in zip(before, after[:3], strict=True))
        assert moved == 2 and after[3] == set().union(*before) - set().union(*after[:3])
        assert all(a <= b for b, a in zip(before, after[:3], strict=True)), (before, after)
        wait_for("every event is counted", lambda: final_counts(outputs(kafka_bootstrap, tag))
                 == dict(Counter(f"k{i % 40}" for i in range(160))), 60, members)
    finally:
        # all at once: stopped one by one, each stop is a rebalance of those left
        for m in members:
            m.signal(signal.SIGTERM)
        try:
            codes = [m.wait(90) for m in members]
        finally:
            for m in members:
                m.signal(signal.SIGKILL)
    assert codes == [0] * len(members), [m.text()[-2000:] for m in members]


def test_a_member_stopped_with_sigterm_commits_and_hands_over_nothing_is_processed_twice(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """Input flows; one of three members gets SIGTERM: it drains its messages in flight,
    commits and leaves; the others take its tasks from its checkpoints, so every event has
    exactly one output."""
    tag = uuid.uuid4().hex[:8]
    topic = f"gevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, 4))
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag, delay=0.005)
               for i in range(3)]
    n = 1200
    events = _events(n, 4)
    feeder = threading.Thread(target=lambda: [
        (run(produce_each(kafka_bootstrap, topic, events[s:s + 100])), time.sleep(0.3))
        for s in range(0, n, 100)])
    leaving = members[0]
    try:
        wait_for("three members split the tasks", lambda: settled(members, 4), 60, members)
        leaving = next(m for m in members if len(m.assignment()[1]) == 2)  # type: ignore[index]
        stays = [m for m in members if m is not leaving]
        feeder.start()
        wait_for("the leaving member has counted some events",
                 lambda: sum(o[2] == leaving.pid for o in outputs(kafka_bootstrap, tag)) >= 30,
                 60, members)
        leaving.signal(signal.SIGTERM)
        assert leaving.proc.wait(60) == 0, leaving.text()[-2000:]
        wait_for("the two others run every task", lambda: settled(stays, 4), 60, stays)
        feeder.join(120)
        wait_for("every event is counted", lambda: final_counts(outputs(kafka_bootstrap, tag))
                 == dict(Counter(f"k{i % 40}" for i in range(n))), 120, stays)
        outs = outputs(kafka_bootstrap, tag)
        # once each: no event was processed again after the handover
        repeated = [i for i, c in Counter(o[3] for o in outs).items() if c > 1]
        assert not repeated and len(outs) == n, (len(outs), repeated[:20])
        assert {o[2] for o in outs} == {m.pid for m in members}
    finally:
        if feeder.ident is not None:
            feeder.join(120)
        codes = [m.stop() for m in members if m is not leaving]
    assert codes == [0, 0], [m.text()[-2000:] for m in members]


def test_a_member_stopped_while_the_group_waits_for_a_frozen_one_leaves_within_the_shutdown_time(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """One of two members is frozen (SIGSTOP) and a third joins: the group's join waits for the
    frozen one until its session times out. The other member, stopped (SIGTERM) meanwhile,
    commits and ends within task.shutdown.ms and a little, not when the join ends."""
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    settings = ("-c", "systems.kafka.consumer.session.timeout.ms=20000",
                "-c", "task.shutdown.ms=3000")
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag, *settings) for i in range(2)]
    stopping, frozen = members
    try:
        wait_for("two members split the tasks", lambda: settled(members, 4), 90, members)
        frozen.signal(signal.SIGSTOP)
        members.append(Member(tmp_path / "host-2", kafka_bootstrap, tag, *settings))
        wait_for("the group rebalances (the member to stop learns it)",
                 lambda: "rebalancing" in stopping.text(), 30, [stopping])
        time.sleep(1.0)  # its join is under way, waiting for the frozen member
        began = time.monotonic()
        stopping.signal(signal.SIGTERM)
        code = stopping.proc.wait(60)
        took = time.monotonic() - began
        assert code == 0, stopping.text()[-3000:]
        assert took < 3.0 + 2.0, f"it took {took:.1f} s to stop:\n{stopping.text()[-3000:]}"
    finally:
        frozen.signal(signal.SIGCONT)
        codes = [m.stop() for m in members[1:]]
        stopping.stop()
    assert codes == [0, 0], [m.text()[-2000:] for m in members[1:]]
