"""A standby answers an interactive query when asked (docs/queries.md): two real ``samza-dsl run
--follow`` members with ``query.enabled`` and ``job.standbytasks.replication.factor=2``, so that
each keeps a standby replica of the other's tasks. Asked with ``standby=true``, the member that
keeps the key's task as a standby answers the committed value from its replica; without it, it
does not. With the active member frozen (SIGSTOP), the client that allows standbys gets the value
from the standby."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from group_helpers import APPS, CLI, Member, kill_left, outputs, settled, stop_all, wait_for
from kafka_helpers import create_topic, keyed, produce_each, run

from samza_dsl.query import QueryClient, QueryError

KEYS = [f"k{i}" for i in range(8)]
#: long enough that a member frozen for a few seconds keeps its tasks (the group_helpers
#: default is 3 s)
ON = ("-c", "query.enabled=true", "-c", "job.standbytasks.replication.factor=2",
      "-c", "systems.kafka.consumer.session.timeout.ms=30000")


def _url(member: Member) -> str | None:
    path = member.folder / "job" / "query" / "container-0.json"
    return str(json.loads(path.read_text())["url"]) if path.exists() else None


def _get(url: str, query: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"{url}/query/counts?{query}", timeout=10) as r:
            return dict(json.loads(r.read()))
    except urllib.error.HTTPError as e:
        return {"status": e.code, **json.loads(e.read())}


def test_a_standby_answers_a_query_when_asked_and_when_the_active_member_is_frozen(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag, *ON) for i in range(2)]
    try:
        wait_for("two members split the tasks", lambda: settled(members, 4), 90, members)
        run(produce_each(kafka_bootstrap, f"gevents-{tag}",
                         keyed(((k, {"i": i}) for i in range(5) for k in KEYS), 4)))
        wait_for("every event is counted", lambda: len(outputs(kafka_bootstrap, tag)) >= 40,
                 60, members)
        wait_for("the endpoints", lambda: all(_url(m) for m in members), 30, members)
        host = socket.gethostname()
        runs = {t: m for m in members for t in m.assignment()[1]}  # type: ignore[index]
        urls = {m.pid: str(_url(m)) for m in members}

        def committed() -> dict[str, Any] | None:
            got = QueryClient(list(urls.values())).get("counts", "k3", read="committed")
            return got if got["value"] == 5 else None
        active = wait_for("the count is committed", committed, 60, members)
        assert active.get("standby") is None, active
        task = str(active["task"])
        owner = runs[task]
        other = next(m for m in members if m is not owner)

        # the other member keeps the task as a standby: asked so, it answers from its replica
        # once the replica reaches the checkpoint that covers the count
        def from_standby() -> dict[str, Any] | None:
            got = _get(urls[other.pid], "key=k3&key_type=str&standby=true")
            return got if got.get("value") == 5 else None
        got = wait_for("the standby replica holds the committed count", from_standby, 60,
                       members)
        assert got["standby"] is True and got["read"] == "committed", got
        assert got["task"] == task and got["member"] == f"pid-{other.pid}@{host}", got
        assert task in got["standby_tasks"] and task not in got["tasks"], got
        assert got["changelog_offset"] > 0, got
        assert got["checkpoint_changelog_offset"] >= got["changelog_offset"], got
        assert "committed state only" in got["standby_read"], got  # read=latest was asked
        # without the flag it answers for its active tasks only, as before
        alone = _get(urls[other.pid], "key=k3&key_type=str")
        assert alone["found"] is False and "standby" not in alone, alone
        assert task not in alone["tasks"], alone
        bad = _get(urls[other.pid], "key=k3&standby=maybe")
        assert bad["status"] == 400 and "standby='maybe'" in bad["error"], bad

        # the owner frozen: its endpoint accepts but never answers
        owner.signal(signal.SIGSTOP)
        try:
            with pytest.raises(QueryError, match="did not"):
                QueryClient(list(urls.values()), timeout=3).get("counts", "k3")
            got = QueryClient(list(urls.values()), timeout=3, standby=True).get("counts", "k3")
            assert got["value"] == 5 and got["standby"] is True, got
            assert got["member"] == f"pid-{other.pid}@{host}" and got["task"] == task, got
            assert got["unanswered"] == [urls[owner.pid]], got
            env = {**os.environ, "SAMZA_TEST_BOOTSTRAP": kafka_bootstrap, "SAMZA_TEST_TAG": tag}
            q = subprocess.run([CLI, "query", f"{APPS}:group", "counts", "k3", "--standby",
                                "--url", urls[owner.pid], "--url", urls[other.pid], "-c",
                                f"job.dir={tmp_path / 'elsewhere'}"], env=env,
                               capture_output=True, text=True, timeout=120)
            assert q.returncode == 0, q.stderr
            assert q.stdout.startswith("5\n") and "standby replica" in q.stdout, q.stdout
        finally:
            owner.signal(signal.SIGCONT)
    finally:
        try:
            stop_all(members)
        finally:
            kill_left(members)
