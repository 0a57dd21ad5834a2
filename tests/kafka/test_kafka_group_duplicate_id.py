"""Two processes with one ``--container-id`` in a job's consumer group (``job.coordinator=kafka``,
a static member's ``group_instance_id``): the second is refused before it joins the group, with
one line naming the first's host and PID, and the group's tasks all run on the members that are
there (tansu on 127.0.0.1, real ``samza-dsl run --follow`` processes).

Before the fix the second joined with the first's ``group_instance_id``: on tansu two of eight
tasks stayed assigned to that id and ran nowhere, without a word (on Apache Kafka the second
fences the first with FENCED_INSTANCE_ID and takes its place)."""

from __future__ import annotations

import socket
import time
import uuid
from collections import Counter
from pathlib import Path

from group_helpers import Member, final_counts, kill_left, outputs, settled, stop_all, wait_for
from kafka_helpers import create_topic, keyed, produce_each, run, topics

from runtime.kafka.committed import log_batches
from runtime.kafka.system import CONTAINER_KEY

PARTITIONS = 8
#: as tests/kafka/test_kafka_group_static.py: static members on tansu with a 3 s session are
#: fenced now and then while they join (a join takes half of it)
SESSION_S = 10
SETTINGS = ("-c", f"systems.kafka.consumer.session.timeout.ms={SESSION_S * 1000}",
            "-c", "systems.kafka.consumer.heartbeat.interval.ms=500")


def _events(start: int, n: int) -> list[tuple[int, bytes | None, bytes | None]]:
    return keyed(((f"k{i % 40}", {"i": i}) for i in range(start, start + n)), PARTITIONS)


def _expected(n: int) -> dict[str, int]:
    return dict(Counter(f"k{i % 40}" for i in range(n)))


def _claims(bootstrap: str, tag: str) -> str:
    """For a failure's message: the container claims in the job's checkpoint topic, in log
    order (offset, process, record), as the duplicate's claim read them."""
    lines = []
    for topic in sorted(t for t in run(topics(bootstrap))
                        if t.startswith("__samza_checkpoint") and tag in t):
        for b in run(log_batches(bootstrap, topic, 0)):
            lines.extend(f"  {topic} {r.offset}: {r.key[len(CONTAINER_KEY):].decode()} "
                         f"{(r.value or b'(tombstone)').decode()}"
                         for r in b.records if r.key and r.key.startswith(CONTAINER_KEY))
    return "\n".join(lines)


def _refused(dup: Member, first: Member, bootstrap: str, tag: str) -> None:
    """``dup`` exits non-zero, with one line naming ``first``'s host and PID, and no traceback."""
    try:
        code = dup.proc.wait(SESSION_S + 30)
    except Exception:
        raise AssertionError(f"the duplicate {dup.pid} did not end:\n{dup.text()[-3000:]}\n"
                             f"the claims (first: pid {first.pid}):\n"
                             f"{_claims(bootstrap, tag)}") from None
    text = dup.text()
    assert code != 0, text[-3000:]
    lines = [line for line in text.splitlines() if "container 1 already runs" in line]
    assert len(lines) == 1, text[-3000:]
    assert f"on host {socket.gethostname()} (pid {first.pid}," in lines[0], lines
    assert "Traceback" not in text, text[-3000:]
    assert dup.assignment() is None, text[-3000:]  # it never joined the group


def test_a_second_member_with_the_same_container_id_is_refused_and_every_task_runs(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """Started 2 s after the first (which is still joining): refused; the first runs all eight
    tasks; once it stops, a process with the id from the duplicate's job.dir (as on another
    host) runs all of them."""
    tag = uuid.uuid4().hex[:8]
    topic = f"gevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, PARTITIONS))
    first = Member(tmp_path / "host-a", kafka_bootstrap, tag, *SETTINGS, "--container-id", "1")
    members = [first]
    time.sleep(2)
    dup = Member(tmp_path / "host-c", kafka_bootstrap, tag, *SETTINGS, "--container-id", "1")
    members.append(dup)
    try:
        _refused(dup, first, kafka_bootstrap, tag)
        wait_for("the first runs the eight tasks", lambda: settled([first], PARTITIONS), 60,
                 [first])
        run(produce_each(kafka_bootstrap, topic, _events(0, 160)))
        wait_for("every event is counted, on every task",
                 lambda: final_counts(outputs(kafka_bootstrap, tag)) == _expected(160), 60,
                 [first])
        assert {o[2] for o in outputs(kafka_bootstrap, tag)} == {first.pid}
        stop_all([first])
        again = Member(tmp_path / "host-c", kafka_bootstrap, tag, *SETTINGS, "--container-id",
                       "1")
        members.append(again)
        wait_for("the restarted member runs every task",
                 lambda: settled([again], PARTITIONS), 60, [again])
        run(produce_each(kafka_bootstrap, topic, _events(160, 160)))
        wait_for("the next events are counted, on every task",
                 lambda: final_counts(outputs(kafka_bootstrap, tag)) == _expected(320), 60,
                 [again])
        stop_all([again])
    finally:
        kill_left(members)


def test_a_duplicate_of_a_settled_member_is_refused_and_a_killed_members_id_is_free_again(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """Started once the first runs all eight tasks: refused, and the first goes on. The first
    SIGKILLed (its claim left behind): a new process with its id, from another job.dir, is not
    held back by that claim and runs every task."""
    tag = uuid.uuid4().hex[:8]
    topic = f"gevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, PARTITIONS))
    first = Member(tmp_path / "host-a", kafka_bootstrap, tag, *SETTINGS, "--container-id", "1")
    members = [first]
    try:
        wait_for("the first runs every task", lambda: settled([first], PARTITIONS), 60, members)
        dup = Member(tmp_path / "host-b", kafka_bootstrap, tag, *SETTINGS, "--container-id", "1")
        members.append(dup)
        _refused(dup, first, kafka_bootstrap, tag)
        run(produce_each(kafka_bootstrap, topic, _events(0, 80)))
        wait_for("the first counts every event", lambda: final_counts(outputs(
            kafka_bootstrap, tag)) == _expected(80), 60, [first])
        assert first.alive() and settled([first], PARTITIONS), first.text()[-3000:]
        first.kill()
        began = time.monotonic()
        after = Member(tmp_path / "host-b", kafka_bootstrap, tag, *SETTINGS, "--container-id", "1")
        members.append(after)
        wait_for("the new process runs every task", lambda: settled([after], PARTITIONS), 60,
                 [after])
        assert "already runs" not in after.text(), after.text()[-3000:]
        run(produce_each(kafka_bootstrap, topic, _events(80, 80)))
        wait_for("the next events are counted", lambda: final_counts(outputs(
            kafka_bootstrap, tag)) == _expected(160), 60, [after])
        took = time.monotonic() - began
        assert after.alive(), after.text()[-3000:]
        stop_all([after])
        assert took < 60, took
    finally:
        kill_left(members)
