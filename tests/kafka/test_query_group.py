"""Interactive queries of a job run as a consumer group (docs/queries.md): two real ``samza-dsl
run --follow`` members with ``query.enabled``, on 127.0.0.1. ``samza-dsl query`` finds the members'
endpoints in their records and answers from the member that owns the key's task; while a third
member joins and then leaves, every answer is the right count or "moving, try again", never a
wrong one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
import uuid
from pathlib import Path

import pytest
from group_helpers import APPS, CLI, Member, kill_left, outputs, settled, stop_all, wait_for
from kafka_helpers import create_topic, keyed, produce_each, run

from samza_dsl.query import QueryClient, QueryError, QueryMoving

KEYS = [f"k{i}" for i in range(20)]


def _url(member: Member) -> str | None:
    path = member.folder / "job" / "query" / "container-0.json"
    return str(json.loads(path.read_text())["url"]) if path.exists() else None


def _ask_every_key(members: list[Member], want: int, answers: dict[str, int]) -> None:
    """Each key once from the members whose endpoints are up: the answer is ``want`` or the
    client says the key's task is moving."""
    urls = [u for u in (_url(m) for m in members) if u]
    client = QueryClient(urls, timeout=10)
    for key in KEYS:
        try:
            got = client.get("counts", key)
        except QueryMoving:
            answers["moving"] = answers.get("moving", 0) + 1
            continue
        except QueryError as e:  # a member between its start and its endpoint, or stopping
            assert "did not" in str(e) or "no query endpoint answered" in str(e), e
            answers["unreachable"] = answers.get("unreachable", 0) + 1
            continue
        assert got["found"] and got["value"] == want, (key, got)
        answers["right"] = answers.get("right", 0) + 1


def test_a_query_reaches_the_owner_and_a_rebalance_never_gives_a_wrong_answer(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    on = ("-c", "query.enabled=true")
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag, *on) for i in range(2)]
    try:
        wait_for("two members split the tasks", lambda: settled(members, 4), 60, members)
        run(produce_each(kafka_bootstrap, f"gevents-{tag}",
                         keyed(((k, {"i": i}) for i in range(10) for k in KEYS), 4)))
        wait_for("every event is counted", lambda: len(outputs(kafka_bootstrap, tag)) >= 200,
                 60, members)
        # the command line, from a folder of its own: the endpoints come from the members'
        # records in the checkpoint topic, the answer from the member that runs the key's task
        env = {**os.environ, "SAMZA_TEST_BOOTSTRAP": kafka_bootstrap, "SAMZA_TEST_TAG": tag}
        host = socket.gethostname()
        owners = {t: f"pid-{m.pid}@{host}" for m in members
                  for t in m.assignment()[1]}  # type: ignore[index]

        def ask() -> dict[str, object] | None:
            q = subprocess.run([CLI, "query", f"{APPS}:group", "counts", "k3", "--json", "-c",
                                f"job.dir={tmp_path / 'elsewhere'}"], env=env,
                               capture_output=True, text=True, timeout=120)
            assert q.returncode in (0, 1, 2), q.stderr
            return json.loads(q.stdout) if q.returncode == 0 else None
        got = wait_for("the members recorded their endpoints", ask, 30, members)
        status = subprocess.run([CLI, "status", f"{APPS}:group", "-c",
                                 f"job.dir={tmp_path / 'elsewhere'}"], env=env,
                                capture_output=True, text=True, timeout=120)
        for m in members:  # samza-dsl status says where each member answers queries
            assert f"; queries at {_url(m)}" in status.stdout, status.stdout
        assert got["value"] == 10 and got["read"] == "latest", got
        assert got["member"] == owners[got["task"]], (got, owners)
        # the other member holds none of the key: it answers so for its own tasks, and the
        # client asking it alone cannot say the key is nowhere
        other = next(m for m in members if f"pid-{m.pid}@{host}" != got["member"])
        with urllib.request.urlopen(f"{_url(other)}/query/counts?key=k3", timeout=10) as r:
            alone = json.loads(r.read())
        assert alone["found"] is False and got["task"] not in alone["tasks"], alone
        assert alone["job_tasks"] == 4 and len(alone["tasks"]) == 2, alone
        with pytest.raises(QueryMoving, match="hold 2 of its 4 tasks"):
            QueryClient([_url(other)]).get("counts", "k3")  # type: ignore[list-item]
        committed = QueryClient([u for u in map(_url, members) if u]).get(
            "counts", "k3", read="committed")
        assert committed["value"] == 10 and committed["read"] == "committed", committed

        # a third member joins, then leaves: the tasks move twice, and every answer meanwhile
        # is the count or "moving"
        answers: dict[str, int] = {}
        third = Member(tmp_path / "host-2", kafka_bootstrap, tag, *on)
        members.append(third)
        wait_for("three members split the tasks",
                 lambda: (_ask_every_key(members, 10, answers), settled(members, 4))[1], 90,
                 members)
        assert third.stop() == 0
        members.remove(third)
        wait_for("two members split the tasks again",
                 lambda: (_ask_every_key(members, 10, answers), settled(members, 4))[1], 90,
                 members)
        _ask_every_key(members, 10, answers)
        assert answers.get("right", 0) >= len(KEYS), answers
    finally:
        try:
            stop_all(members)
        finally:
            kill_left(members)


def test_a_static_container_on_kafka_answers_from_its_job_dir_record(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """job.coordinator=static: no group records the endpoint; ``samza-dsl query`` given the
    container's job.dir finds it there."""
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    member = Member(tmp_path / "host-0", kafka_bootstrap, tag, "-c", "query.enabled=true",
                    "-c", "job.coordinator=static")
    try:
        wait_for("the endpoint's record", lambda: _url(member), 60, [member])
        run(produce_each(kafka_bootstrap, f"gevents-{tag}",
                         keyed(((k, {"i": i}) for i in range(3) for k in KEYS), 4)))
        env = {**os.environ, "SAMZA_TEST_BOOTSTRAP": kafka_bootstrap, "SAMZA_TEST_TAG": tag}

        def ask() -> dict[str, object] | None:
            q = subprocess.run([CLI, "query", f"{APPS}:group", "counts", "k7", "--json",
                                "-c", f"job.dir={member.folder / 'job'}"], env=env,
                               capture_output=True, text=True, timeout=120)
            assert q.returncode in (0, 1), q.stderr
            got = json.loads(q.stdout)
            return got if got.get("value") == 3 else None
        got = wait_for("the count of k7", ask, 60, [member])
        assert got["member"] == "container-0" and got["job_tasks"] == 4, got
    finally:
        try:
            stop_all([member])
        finally:
            kill_left([member])
