"""Standby tasks (``job.standbytasks.replication.factor``): each stateful task of a Kafka job's
consumer group has standbys on other members that tail its changelog into their job.dir, so a
task that moves to its standby replays only the changelog's tail (tansu on 127.0.0.1, real
``samza-dsl run --follow`` processes, stores in LMDB)."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

from group_helpers import SESSION_MS, Member, final_counts, outputs, settled, wait_for
from kafka_helpers import create_topic, keyed, produce_batched, produce_each, run

KEYS = 12_000
STANDBY = ("-c", "job.standbytasks.replication.factor=2", "-c", "metrics.reporters=json",
           "-c", "metrics.reporter.interval.ms=300")
_LINE = re.compile(r"group generation (\d+): (runs|standby for) (.*?)(?: \(restoring .*\))?$")
_RESTORED = re.compile(r"task (.+?): store 'counts' restored \((\S+)\): replayed (\d+) changelog "
                       r"entries, offsets \[(\d+), (\d+)\) of the checkpoint's (\d+)")


def _roles(member: Member) -> dict[int, dict[str, set[str]]]:
    """generation -> {"runs": tasks, "standby for": tasks} as the member logged them."""
    out: dict[int, dict[str, set[str]]] = {}
    for line in member.text().splitlines():
        m = _LINE.search(line)
        if m:
            names = set() if m.group(3) == "no task" else set(m.group(3).split(", "))
            out.setdefault(int(m.group(1)), {"runs": set(), "standby for": set()})[
                m.group(2)] = names
    return out


def _metrics(member: Member) -> list[dict[str, object]]:
    """The metrics the member's json reporter wrote last."""
    files = list(member.folder.rglob("metrics-*.json"))
    if not files:
        return []
    try:
        return list(json.loads(files[0].read_text())["metrics"])
    except (OSError, ValueError):
        return []  # being replaced


def _events(start: int, n: int) -> list[tuple[int, bytes | None, bytes | None]]:
    return keyed(((f"k{i % KEYS}", {"i": i}) for i in range(start, start + n)), 4)


def test_a_standby_takes_over_a_killed_members_tasks_replaying_only_the_changelogs_tail(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """Three members, R=2, a count per key over 12,000 keys in a table with a changelog: each
    task has a standby on another member (never on its active's). The member running two tasks
    is SIGKILLed while input flows; a survivor that was a task's standby runs it, replaying far
    fewer changelog entries than the changelog holds; the final counts are exact."""
    tag = uuid.uuid4().hex[:8]
    topic = f"gevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, 4))
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag, *STANDBY) for i in range(3)]
    first, more = KEYS, 600
    feeder = threading.Thread(target=lambda: run(produce_each(kafka_bootstrap, topic,
                                                              _events(first, more))))
    lost = members[0]
    try:
        wait_for("three members split the tasks", lambda: settled(members, 4), 60, members)
        generation = members[0].assignment()[0]  # type: ignore[index]
        roles = {m.pid: _roles(m).get(generation, {}) for m in members}
        wait_for("every member logged its standbys", lambda: all(
            _roles(m).get(generation, {}).get("standby for") for m in members), 30, members)
        roles = {m.pid: _roles(m)[generation] for m in members}
        # each task has exactly one standby (R - 1), never on the member that runs it
        standbys = Counter(t for r in roles.values() for t in r["standby for"])
        assert standbys == {f"Partition {p}": 1 for p in range(4)}, roles
        assert all(not (r["runs"] & r["standby for"]) for r in roles.values()), roles

        run(produce_batched(kafka_bootstrap, topic, _events(0, first)))
        wait_for("the first events are counted", lambda: final_counts(
            outputs(kafka_bootstrap, tag)) == {f"k{i}": 1 for i in range(KEYS)}, 120, members)
        time.sleep(2)  # the standbys reach the last checkpoint
        lost = next(m for m in members if len(roles[m.pid]["runs"]) == 2)
        survivors = [m for m in members if m is not lost]
        feeder.start()
        wait_for("the member to be lost counts more events", lambda: sum(
            o[2] == lost.pid and o[3] >= first for o in outputs(kafka_bootstrap, tag)) >= 10,
            60, members)
        seen = {m.pid: len(m.text()) for m in survivors}
        # the roles as the kill finds them: on a loaded machine a member may have missed a
        # heartbeat since, and the group moved a task before the kill (its restore is older)
        roles = {m.pid: _roles(m)[max(_roles(m))] for m in members}
        moved = roles[lost.pid]["runs"]
        lost.signal(signal.SIGKILL)
        wait_for("the survivors run every task", lambda: settled(survivors, 4),
                 SESSION_MS / 1000 + 30, survivors)
        feeder.join(120)
        expected = dict(Counter(f"k{i % KEYS}" for i in range(first + more)))
        wait_for("every event is counted", lambda: final_counts(outputs(kafka_bootstrap, tag))
                 == expected, 120, survivors)

        restores = [(m.pid, *r.groups()) for m in survivors
                    for r in _RESTORED.finditer(m.text()[seen[m.pid]:])]
        took = {(pid, task): (mode, int(n), int(start), int(cp))
                for pid, task, mode, n, start, _, cp in restores if task in moved}
        assert {task for _, task in took} == moved, (moved, restores, [
            line for m in survivors for line in m.text()[seen[m.pid]:].splitlines()
            if "generation" in line])
        by_standby = {task: v for (pid, task), v in took.items()
                      if task in roles[pid]["standby for"]}
        assert by_standby, (roles, restores)  # at least one moved task went to its standby
        for task, (mode, n, start, cp) in by_standby.items():
            # the changelog holds a count for each of the task's ~3,000 keys; the standby
            # replays only what the lost member checkpointed after the standby's last step
            assert mode in ("tail", "host-affinity") and cp > 2000 and n <= cp - start, \
                (task, mode, n, start, cp)
            assert n < cp / 10, \
                (task, mode, n, start, cp)
            # the store's restore metrics say the same
            pid = next(p for (p, t) in took if t == task)
            member = next(m for m in survivors if m.pid == pid)
            wait_for(f"the restore metrics of {task} on {pid}",
                     lambda m=member, t=task, n=n: any(  # type: ignore[misc]
                         x["name"] == "restore-entries" and x["value"] == n
                         and x["labels"] == {"task": t, "store": "counts"}
                         for x in _metrics(m)), 10, survivors)
        # the standbys applied the changelog's entries as the actives wrote them
        for m in survivors:
            assert any(x["name"] == "standby-entries" and x["value"] > 1000  # type: ignore[operator]
                       for x in _metrics(m)), m.pid
        # and in the new generation too, no member is a standby of a task it runs
        for m in survivors:
            last = max(_roles(m))
            r = _roles(m)[last]
            assert not (r["runs"] & r["standby for"]), (m.pid, r)
    finally:
        if feeder.ident is not None:
            feeder.join(120)
        lost.kill()
        codes = [m.stop() for m in members if m is not lost]
    assert codes == [0, 0], [m.text()[-2000:] for m in members]
