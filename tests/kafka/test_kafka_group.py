"""Containers of a Kafka job that find each other through Kafka's consumer group protocol
(``job.coordinator=kafka``, the default for ``samza-dsl run --follow`` of a Kafka job): every
process started is a member of the group ``<job.name>-<job.id>`` and runs its share of the tasks
(tansu on 127.0.0.1, real processes, stores in LMDB with changelog topics)."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from group_helpers import SESSION_MS, Member, final_counts, outputs, settled, wait_for
from kafka_helpers import create_topic, keyed, produce_each, run


def _events(start: int, n: int, keys: int = 20) -> list[tuple[int, bytes | None, bytes | None]]:
    return keyed(((f"k{i % keys}", {"i": i}) for i in range(start, start + n)), 4)


def _expected(n: int, keys: int = 20) -> dict[str, int]:
    return dict(Counter(f"k{i % keys}" for i in range(n)))


def test_two_copies_from_two_folders_share_the_work_and_count_exactly(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag) for i in range(2)]
    try:
        # both join one group and split the four tasks
        wait_for("two members split the tasks", lambda: settled(members, 4), 60, members)
        assert [len(m.assignment()[1]) for m in members] == [2, 2]  # type: ignore[index]
        n = 400
        run(produce_each(kafka_bootstrap, f"gevents-{tag}", _events(0, n)))
        wait_for("every event is counted", lambda: final_counts(outputs(kafka_bootstrap, tag))
                 == _expected(n), 90, members)
        outs = outputs(kafka_bootstrap, tag)
        # each event was processed once, by one of the two, and both did some
        assert sorted(o[3] for o in outs) == list(range(n))
        assert {o[2] for o in outs} == {m.pid for m in members}
    finally:
        codes = [m.stop() for m in members]
    assert codes == [0, 0], [m.text()[-2000:] for m in members]


def test_a_member_that_joins_mid_stream_takes_its_share_and_nothing_is_lost_or_repeated(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """A map of 200 ms per message: the first member keeps its membership (its heartbeats are
    never starved) while it works for twice the session timeout; then a second member joins,
    the first drains, commits and hands over two tasks, and every event is processed once."""
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    first = Member(tmp_path / "host-0", kafka_bootstrap, tag, delay=0.2)
    members = [first]
    try:
        wait_for("the first member runs every task", lambda: settled(members, 4), 60, members)
        generation = first.assignment()[0]  # type: ignore[index]
        n = 240
        run(produce_each(kafka_bootstrap, f"gevents-{tag}", _events(0, n)))
        began = time.monotonic()
        # its first outputs take a few seconds (a first batch per task sizes its batches)
        wait_for("the first member writes outputs", lambda: outputs(kafka_bootstrap, tag), 60,
                 members)
        time.sleep(max(0.0, began + 2 * SESSION_MS / 1000 - time.monotonic()))
        assert first.assignment() == (generation, [f"Partition {p}" for p in range(4)]), \
            first.text()[-2000:]
        done = len(outputs(kafka_bootstrap, tag))
        assert 0 < done < n / 2, done  # it worked, one message at a time (5 a second)
        second = Member(tmp_path / "host-1", kafka_bootstrap, tag, delay=0.2)
        members.append(second)
        wait_for("the two split the tasks", lambda: settled(members, 4), 60, members)
        assert first.assignment()[0] > generation  # type: ignore[index]
        wait_for("every event is counted", lambda: final_counts(outputs(kafka_bootstrap, tag))
                 == _expected(n), 120, members)
        outs = outputs(kafka_bootstrap, tag)
        assert sorted(o[3] for o in outs) == list(range(n))  # once each: a clean handover
        assert {o[2] for o in outs} == {first.pid, second.pid}
    finally:
        codes = [m.stop() for m in members]
    assert codes == [0] * len(members), [m.text()[-2000:] for m in members]


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSTOP"])
def test_the_survivors_take_over_the_tasks_of_a_lost_member_and_count_exactly(
        kafka_bootstrap: str, tmp_path: Path, how: str) -> None:
    """Three members of a job counting in a table with a changelog, input flowing; one is
    killed (or frozen past the session timeout): within the session timeout plus the restore
    the other two run its tasks, restored from the changelog; the final counts are exact and
    every event has an output (at least once)."""
    tag = uuid.uuid4().hex[:8]
    topic = f"gevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, 4))
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag, delay=0.01)
               for i in range(3)]
    n = 900
    feeder = threading.Thread(target=lambda: run(produce_each(kafka_bootstrap, topic,
                                                              _events(0, n))))
    lost = members[0]
    try:
        wait_for("three members split the tasks", lambda: settled(members, 4), 60, members)
        lost = next(m for m in members if len(m.assignment()[1]) == 1)  # type: ignore[index]
        survivors = [m for m in members if m is not lost]
        feeder.start()
        wait_for("the member to be lost has counted some events",
                 lambda: sum(o[2] == lost.pid for o in outputs(kafka_bootstrap, tag)) >= 10,
                 60, members)
        lost.signal(getattr(signal, how))
        t0 = time.monotonic()
        wait_for("the survivors run every task", lambda: settled(survivors, 4),
                 SESSION_MS / 1000 + 20, survivors)
        took = time.monotonic() - t0
        assert took < SESSION_MS / 1000 + 15, took
        feeder.join(120)
        wait_for("every event is counted", lambda: final_counts(outputs(kafka_bootstrap, tag))
                 == _expected(n), 120, survivors)
        outs = outputs(kafka_bootstrap, tag)
        assert {o[3] for o in outs} == set(range(n))
        assert {o[2] for o in outs} >= {m.pid for m in survivors}
    finally:
        if feeder.is_alive() or feeder.ident is not None:
            feeder.join(120)
        lost.kill()
        codes = [m.stop() for m in members if m is not lost]
    assert codes == [0, 0], [m.text()[-2000:] for m in members]


def test_the_coordinator_is_kafka_only_for_runs_that_follow_and_says_what_to_do_otherwise(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    from kafka_apps import group_app

    from runtime import LocalRunner
    from runtime.kafka.group import job_coordinator
    from samza_dsl.errors import ConfigError
    from samza_dsl.jobconfig import JobConfig

    name = "group-x-1"
    for given, follow, chosen in (({}, True, "kafka"), ({}, False, "static"),
                                  ({"job.container.count": 2}, True, "static"),
                                  ({"job.coordinator": "static"}, True, "static")):
        assert job_coordinator(JobConfig.validated(given).job, follow=follow,
                               job_name=name) == chosen
    app = group_app(kafka_bootstrap, uuid.uuid4().hex[:8])
    for config, words in (({}, "add --follow, or set job.coordinator=static"),
                          ({"job.container.count": 2}, "leave out --containers")):
        with pytest.raises(ConfigError) as err:
            LocalRunner(app, {"job.coordinator": "kafka", "job.dir": str(tmp_path), **config}
                        ).run()
        assert words in str(err.value) and "\n" not in str(err.value), str(err.value)
    with pytest.raises(ConfigError, match="must be kafka or static"):
        LocalRunner(app, {"job.coordinator": "zookeeper"})


def test_a_member_whose_store_restore_fails_stops_naming_the_store_and_task_and_the_group_goes_on(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """The second member cannot open the stores of the tasks it is dealt (a file stands where
    their directories go): it stops with an error naming the store and the task; the first
    member runs every task again and every count is exact."""
    from runtime.host.jobdir import store_dir

    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    first = Member(tmp_path / "host-0", kafka_bootstrap, tag)
    members = [first]
    try:
        wait_for("the first member runs every task", lambda: settled(members, 4), 60, members)
        run(produce_each(kafka_bootstrap, f"gevents-{tag}", _events(0, 200)))
        wait_for("the first events are counted", lambda: final_counts(outputs(
            kafka_bootstrap, tag)) == _expected(200), 60, members)
        broken = tmp_path / "host-1" / "job"
        for p in range(4):
            path = Path(store_dir(str(broken), "counts", f"Partition {p}"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("not a store directory")
        second = Member(tmp_path / "host-1", kafka_bootstrap, tag)
        code = second.proc.wait(SESSION_MS / 1000 + 60)
        text = second.text()
        assert code != 0, text[-3000:]
        error = [line for line in text.splitlines() if "error" in line]
        assert any("store 'counts'" in line and "task 'Partition " in line for line in error), \
            text[-3000:]
        wait_for("the first member runs every task again", lambda: len(
            first.assignment()[1]) == 4 and first.assignment()[0] > 0, SESSION_MS / 1000 + 60,
            [first])  # type: ignore[index]
        run(produce_each(kafka_bootstrap, f"gevents-{tag}", _events(200, 200)))
        wait_for("every event is counted", lambda: final_counts(outputs(kafka_bootstrap, tag))
                 == _expected(400), 90, [first])
    finally:
        code = first.stop()
    assert code == 0, first.text()[-3000:]
