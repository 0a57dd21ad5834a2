"""Under ``job.coordinator=static``, one process per container id on all hosts: a second
``samza-dsl run --container-id I`` of the job is refused with an error naming the first, also
from another job.dir (two job dirs on this machine stand for two hosts: the job.dir lock of one
cannot see the other). The claim lives in the job's checkpoint topic (tansu on 127.0.0.1)."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

from group_helpers import SESSION_MS, Member, outputs, wait_for
from kafka_helpers import create_topic, keyed, produce_each, run

STATIC = ("-c", "job.coordinator=static", "--containers", "2", "--container-id", "0")


def _events(start: int, n: int) -> list[tuple[int, bytes | None, bytes | None]]:
    return keyed(((f"k{i % 20}", {"i": i}) for i in range(start, start + n)), 4)


def _exit(m: Member, timeout: float) -> int:
    try:
        return m.proc.wait(timeout)
    except Exception:
        raise AssertionError(f"member {m.pid} did not end in {timeout} s:\n"
                             f"{m.text()[-3000:]}") from None


def test_a_second_process_for_a_container_id_from_another_job_dir_is_refused_naming_the_first(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    topic = f"gevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, 4))
    first = Member(tmp_path / "host-a", kafka_bootstrap, tag, *STATIC)
    members = [first]
    try:
        run(produce_each(kafka_bootstrap, topic, _events(0, 40)))
        wait_for("container 0 processes its tasks' events",
                 lambda: any(o[2] == first.pid for o in outputs(kafka_bootstrap, tag)), 60,
                 members)
        began = time.monotonic()
        second = Member(tmp_path / "host-b", kafka_bootstrap, tag, *STATIC)
        code = _exit(second, SESSION_MS / 1000 + 30)
        took = time.monotonic() - began
        text = second.text()
        assert code != 0, text[-3000:]
        assert "container 0 already runs on host" in text, text[-3000:]
        assert f"pid {first.pid}" in text and str(tmp_path / "host-a" / "job") in text, text
        assert took < SESSION_MS / 1000 + 20, took
        assert not any(o[2] == second.pid for o in outputs(kafka_bootstrap, tag))
        # the first goes on
        run(produce_each(kafka_bootstrap, topic, _events(40, 40)))
        wait_for("container 0 processes the next events", lambda: {
            o[3] for o in outputs(kafka_bootstrap, tag) if o[2] == first.pid} & set(range(40, 80)),
            60, members)
        assert first.alive()
    finally:
        code = first.stop()
    assert code == 0, first.text()[-3000:]
    # once it stopped, the id is free at once: another host's process runs it
    third = Member(tmp_path / "host-b", kafka_bootstrap, tag, *STATIC)
    try:
        run(produce_each(kafka_bootstrap, topic, _events(80, 40)))
        wait_for("another host runs container 0 now", lambda: any(
            o[2] == third.pid for o in outputs(kafka_bootstrap, tag)), 60, [third])
    finally:
        code = third.stop()
    assert code == 0, third.text()[-3000:]


def test_a_frozen_container_whose_id_was_taken_over_stops_saying_so(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """Container 0 frozen (SIGSTOP): a process for container 0 from another job.dir waits a
    session timeout without a renewal from it, then runs the container; the frozen one, let go
    on (SIGCONT), learns it was taken over and stops with an error that says so."""
    tag = uuid.uuid4().hex[:8]
    topic = f"gevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, 4))
    first = Member(tmp_path / "host-a", kafka_bootstrap, tag, *STATIC)
    second = None
    try:
        run(produce_each(kafka_bootstrap, topic, _events(0, 40)))
        wait_for("container 0 processes its tasks' events",
                 lambda: any(o[2] == first.pid for o in outputs(kafka_bootstrap, tag)), 60,
                 [first])
        first.signal(signal.SIGSTOP)
        second = Member(tmp_path / "host-b", kafka_bootstrap, tag, *STATIC)
        run(produce_each(kafka_bootstrap, topic, _events(40, 40)))
        wait_for("the second process runs container 0", lambda: any(
            o[2] == second.pid for o in outputs(kafka_bootstrap, tag)), 60, [second])
        first.signal(signal.SIGCONT)
        code = _exit(first, 30)
        assert code != 0, first.text()[-3000:]
        assert "another process took it over on host" in first.text(), first.text()[-3000:]
        assert f"pid {second.pid}" in first.text(), first.text()[-3000:]
        assert second.alive(), second.text()[-3000:]
    finally:
        first.kill()
        code = second.stop() if second is not None else 0
    assert code == 0, second.text()[-3000:] if second is not None else ""


def test_a_second_copy_of_a_job_in_one_container_from_another_job_dir_is_refused(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """A static job in one container (no --container-id) is container 0: a copy of it started
    from another job.dir (another host) is refused rather than writing every output twice."""
    tag = uuid.uuid4().hex[:8]
    topic = f"gevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, 4))
    one = ("-c", "job.coordinator=static")
    first = Member(tmp_path / "host-a", kafka_bootstrap, tag, *one)
    try:
        run(produce_each(kafka_bootstrap, topic, _events(0, 40)))
        wait_for("the job processes its events",
                 lambda: any(o[2] == first.pid for o in outputs(kafka_bootstrap, tag)), 60,
                 [first])
        second = Member(tmp_path / "host-b", kafka_bootstrap, tag, *one)
        code = _exit(second, SESSION_MS / 1000 + 30)
        text = second.text()
        assert code != 0, text[-3000:]
        assert "container 0 already runs on host" in text, text[-3000:]
        assert f"pid {first.pid}" in text, text[-3000:]
        assert not any(o[2] == second.pid for o in outputs(kafka_bootstrap, tag))
        assert first.alive()
    finally:
        code = first.stop()
    assert code == 0, first.text()[-3000:]
