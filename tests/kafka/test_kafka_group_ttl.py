"""A table with a ttl (event time) in a job run as a consumer group: two ``samza-dsl run
--follow`` members, one SIGKILLed while gets flow and a new one started; the tasks it held are
rebuilt from their changelogs elsewhere, and what the job emits after the takeover shows the
expired entries gone and the live ones there (``kafka_apps.ttl_app``).

Each of the 4 partitions gets, in order, ``old`` at 88 s, ``clk`` at 100 s (the table's clock:
``old`` has expired, 88 + 10 <= 100), ``clk`` again at 2 s (written late: expired at once) and
``live`` at 95 s, then gets of ``old`` and ``live`` only. Only ``live`` is held then, so a store
rebuilt from the changelog has a clock of 95 s, under which ``old`` would be live again
(88 + 10 > 95): a restore that brought ``old`` back would show it to every get after the
takeover. Gets answered again after the takeover (those after the lost member's last
checkpoint) must give the same answers; so would puts replayed from an earlier checkpoint, as
``clk`` at 100 s comes again after ``old``."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from group_helpers import (
    Member,
    checkpoints,
    kill_left,
    settled,
    stop_all,
    timed_records,
    wait_for,
)
from kafka_helpers import create_topic, produce_each, run

from operators.hashing import partition_for
from runtime.kafka.admin import describe_topics

PARTS = 4


def _keys() -> dict[int, dict[str, str]]:
    """For each partition, a key of each role (old, clk, live) that Kafka's partitioner puts
    there."""
    out: dict[int, dict[str, str]] = {p: {} for p in range(PARTS)}
    for n in range(1000):
        for role in ("old", "clk", "live"):
            key = f"{role}{n}"
            out[partition_for(key.encode(), PARTS)].setdefault(role, key)
        if all(len(roles) == 3 for roles in out.values()):
            return out
    raise AssertionError(f"no key of each role for each partition: {out}")


def _record(key: str, kind: str, ts: float, i: int) -> tuple[int, bytes, bytes]:
    return (partition_for(key.encode(), PARTS), key.encode(),
            json.dumps({"kind": kind, "ts": ts, "i": i}).encode())


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes]]) -> None:
    run(produce_each(bootstrap, topic, records))


def _answers(bootstrap: str, tag: str) -> dict[int, list[list[Any]]]:
    """Every output of the job: get id -> [[key, ts found or None, pid], ...]."""
    topic = f"gtout-{tag}"
    if run(describe_topics(bootstrap, [topic]))[topic] is None:
        return {}
    out: dict[int, list[list[Any]]] = {}
    for _p, _o, _t, k, v in timed_records(bootstrap, topic):
        if k is None or v is None:
            continue
        i, found, pid = json.loads(v)
        out.setdefault(i, []).append([k.decode(), found, pid])
    return out


def test_a_takeover_in_a_group_restores_live_entries_and_no_expired_one(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    topic = f"gtevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, PARTS))
    keys = _keys()
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag, app="ttl")
               for i in range(2)]
    gets: dict[int, str] = {}  # get id -> its key

    def get_all(start: int, rounds: int) -> list[tuple[int, bytes, bytes]]:
        records = []
        i = start
        for _ in range(rounds):
            for p in range(PARTS):
                for role in ("old", "live"):
                    gets[i] = keys[p][role]
                    records.append(_record(keys[p][role], "get", 100, i))
                    i += 1
        return records

    puts = [_record(keys[p][role], "put", ts, -1) for p in range(PARTS)
            for role, ts in (("old", 88), ("clk", 100), ("clk", 2), ("live", 95))]
    first = get_all(0, 1)
    flowing = threading.Event()  # cleared: the feeder stops after its round
    flowing.set()

    def feed() -> None:
        while flowing.is_set():
            _produce(kafka_bootstrap, topic, get_all(len(gets), 1))
            time.sleep(0.02)

    feeder = threading.Thread(target=feed)
    try:
        wait_for("two members split the tasks", lambda: settled(members, PARTS), 60, members)
        _produce(kafka_bootstrap, topic, puts + first)
        wait_for("the first gets are answered",
                 lambda: set(_answers(kafka_bootstrap, tag)) >= set(range(len(first))), 60,
                 members)
        lost = members[0]
        feeder.start()
        wait_for("the member to be lost answers gets as they flow", lambda: sum(
            a[2] == lost.pid for i, answers in _answers(kafka_bootstrap, tag).items()
            if i >= len(first) for a in answers) >= 8, 60, members)
        # and has checkpointed its tasks past the puts (offsets 0 to 3 of each partition), so
        # their changelogs hold entries a takeover must replay (killed before its first
        # checkpoint, its tasks would be read again from the input's start instead)
        lost_tasks = lost.assignment()[1]  # type: ignore[index]
        wait_for("the member to be lost checkpoints its tasks past the puts", lambda: all(
            min(checkpoints(kafka_bootstrap, f"gttl-{tag}-1", "events")[0].get(t, {}).values(),
                default=-1) >= 4 for t in lost_tasks), 60, members)
        lost.kill()
        at_kill = len(gets)
        survivor = members[1]
        members = [survivor, Member(tmp_path / "host-2", kafka_bootstrap, tag, app="ttl")]
        wait_for("the survivor and a new member split the tasks",
                 lambda: settled(members, PARTS), 60, members)
        assert feeder.is_alive() and len(gets) > at_kill  # the gets flowed all along
        flowing.clear()
        feeder.join(120)
        last = get_all(len(gets), 1)
        _produce(kafka_bootstrap, topic, last)
        wait_for("every get is answered",
                 lambda: set(_answers(kafka_bootstrap, tag)) >= set(gets), 90, members)
        answers = _answers(kafka_bootstrap, tag)
        # the takeover rebuilt the lost member's stores from their changelogs elsewhere
        replayed = [int(n) for m in members
                    for n in re.findall(r"restored \(rebuilt\): replayed (\d+)", m.text())]
        assert replayed and min(replayed) > 0, [m.text()[-2000:] for m in members]
        # every answer, before the kill, by the members after it, and of gets answered twice
        # (after the last checkpoint of the lost member): old expired, live there
        wrong = {i: (gets[i], a) for i, got in answers.items() for a in got
                 if a[1] != (None if gets[i].startswith("old") else 95)}
        assert not wrong, wrong
        after = {a[2] for i in range(len(gets) - len(last), len(gets)) for a in answers[i]}
        assert after and lost.pid not in after and after <= {m.pid for m in members}
        stop_all(members)
    finally:
        flowing.clear()
        if feeder.ident is not None:
            feeder.join(120)
        kill_left(members)
