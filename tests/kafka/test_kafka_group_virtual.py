"""Virtual tasks (``job.elasticity.factor``) in a consumer group (``job.coordinator=kafka``): they
are tasks too. The group deals out whole virtual tasks; the virtual tasks of one partition may run
on different members, each reading the whole partition and keeping its own key bucket (tansu on
127.0.0.1, real processes, a table with a changelog per virtual task)."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

from group_helpers import SESSION_MS, Member, final_counts, outputs, settled, wait_for
from kafka_helpers import create_topic, keyed, produce_each, run

FACTOR = ("-c", "job.elasticity.factor=2", "-c", "job.coordinator=kafka")
TASKS = [f"Partition {p} bucket {b} of 2" for p in range(2) for b in range(2)]


def _events(start: int, n: int, keys: int = 20) -> list[tuple[int, bytes | None, bytes | None]]:
    return keyed(((f"k{i % keys}", {"i": i}) for i in range(start, start + n)), 2)


def _expected(n: int, keys: int = 20) -> dict[str, int]:
    return dict(Counter(f"k{i % keys}" for i in range(n)))


def test_two_members_split_the_virtual_tasks_and_one_takes_all_four_when_the_other_is_lost(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """2 partitions with factor 2 are 4 tasks. One member runs all four; a second joins and
    takes 2 of them (the first stops reading for the two it lost, and keeps its bucket of each
    partition for the two it kept); every count is exact. The second is killed: the first runs
    all 4 again, from their checkpoints and changelogs, and the counts stay exact."""
    tag = uuid.uuid4().hex[:8]
    topic = f"gevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, 2))
    first = Member(tmp_path / "host-0", kafka_bootstrap, tag, *FACTOR)
    members = [first]
    try:
        wait_for("the first member runs the four virtual tasks", lambda: settled(members, 4),
                 60, members)
        assert sorted(first.assignment()[1]) == sorted(TASKS)  # type: ignore[index]
        n = 200
        run(produce_each(kafka_bootstrap, topic, _events(0, n)))
        wait_for("the first batch is counted", lambda: final_counts(outputs(
            kafka_bootstrap, tag)) == _expected(n), 90, members)
        second = Member(tmp_path / "host-1", kafka_bootstrap, tag, *FACTOR)
        members.append(second)
        wait_for("two members split the four virtual tasks", lambda: settled(members, 4), 60,
                 members)
        shares = [m.assignment()[1] for m in members]  # type: ignore[index]
        assert [len(s) for s in shares] == [2, 2], shares
        run(produce_each(kafka_bootstrap, topic, _events(n, n)))
        wait_for("the second batch is counted", lambda: final_counts(outputs(
            kafka_bootstrap, tag)) == _expected(2 * n), 90, members)
        outs = outputs(kafka_bootstrap, tag)
        assert sorted(o[3] for o in outs) == list(range(2 * n))  # each once: clean handover
        assert {o[3] for o in outs if o[2] == second.pid} \
            and {o[3] for o in outs if o[2] == second.pid} <= set(range(n, 2 * n))

        second.kill()
        wait_for("the first member runs all four tasks again", lambda: settled([first], 4),
                 SESSION_MS / 1000 + 30, [first])
        run(produce_each(kafka_bootstrap, topic, _events(2 * n, n)))
        wait_for("every event of the three batches is counted",
                 lambda: final_counts(outputs(kafka_bootstrap, tag)) == _expected(3 * n), 90,
                 [first])
        outs = outputs(kafka_bootstrap, tag)
        assert {o[3] for o in outs} == set(range(3 * n))
        assert {o[3] for o in outs if o[2] == first.pid} >= set(range(2 * n, 3 * n))
    finally:
        for m in members[1:]:
            m.kill()
        code = first.stop()
    assert code == 0, first.text()[-3000:]
    # a task it lost was read no more: it ran each of its tasks' readers once at a time
    assert "Traceback" not in first.text(), first.text()[-3000:]
