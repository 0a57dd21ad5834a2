"""``samza-dsl status`` of a job run as a consumer group of two real ``samza-dsl run --follow``
processes (tansu on 127.0.0.1): its members and hosts, each member's tasks, the generation, the
last rebalance and how long it took, and the lag of each task."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from group_helpers import APPS, CLI, Member, outputs, settled, wait_for
from kafka_helpers import create_topic, keyed, produce_each, run


def _status(bootstrap: str, tag: str, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SAMZA_TEST_BOOTSTRAP": bootstrap, "SAMZA_TEST_TAG": tag}
    out = subprocess.run([CLI, "status", f"{APPS}:group", "-c", f"job.dir={folder}", *args],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out


def _group(bootstrap: str, tag: str, folder: Path) -> dict[str, Any]:
    got: dict[str, Any] = json.loads(_status(bootstrap, tag, folder, "--json").stdout)["group"]
    return got


def test_status_shows_the_group_members_their_tasks_the_rebalance_and_the_lag_per_task(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag) for i in range(2)]
    seen = tmp_path / "elsewhere"  # status runs from a folder of its own: another machine
    try:
        wait_for("two members split the tasks", lambda: settled(members, 4), 60, members)
        generation = members[0].assignment()[0]  # type: ignore[index]
        run(produce_each(kafka_bootstrap, f"gevents-{tag}",
                         keyed(((f"k{i % 20}", {"i": i}) for i in range(200)), 4)))
        wait_for("every event is counted", lambda: len(outputs(kafka_bootstrap, tag)) >= 200,
                 60, members)

        def current() -> dict[str, Any] | bool:
            g = _group(kafka_bootstrap, tag, seen)
            return g if g and g["generation"] == generation and len(g["members"]) == 2 \
                and all(t["lag"] == 0 for t in g["tasks"]) else False
        g = wait_for("status shows both members, caught up", current, 30, members)
        host = socket.gethostname()
        by_pid = {m["pid"]: m for m in g["members"]}
        assert set(by_pid) == {m.pid for m in members}, g
        for m in members:
            row = by_pid[m.pid]
            assert row["host"] == host and row["member"] == f"pid-{m.pid}@{host}", row
            assert row["active"] == m.assignment()[1], (row, m.assignment())  # type: ignore[index]
            assert row["standby"] == [] and row["lag"] == 0, row
        assert {t["task"]: t["member"] for t in g["tasks"]} == {
            t: f"pid-{m.pid}@{host}" for m in members for t in m.assignment()[1]}  # type: ignore[index]
        assert time.time() - 120 < g["last_rebalance"] <= time.time(), g
        assert 0 <= g["last_rebalance_s"] < 60, g
        # a store another run left in the job.dir status is given shows nowhere: the group's
        # stores are in its members' own job dirs, and the group has one generation
        stale = seen / "stores" / "counts" / "Partition_0"
        stale.mkdir(parents=True)
        (stale / "data.mdb").write_bytes(b"x" * 1_000_000)
        whole = json.loads(_status(kafka_bootstrap, tag, seen, "--json").stdout)
        assert whole["job_dir"] is None and whole["group"]["generation"] == generation, whole
        assert whole["containers"] == [] and whole["locks"] == [], whole
        dirs = {m.pid: str((m.folder / "job").resolve()) for m in members}
        assert {r["pid"]: r["job_dir"] for r in whole["group"]["members"]} == dirs, whole
        (counts,) = whole["stores"]
        assert sorted(counts["paths"]) == sorted(f"{d}/stores/counts" for d in dirs.values())
        assert counts["exists"] and 0 < counts["bytes"] < 1_000_000, counts
        text = _status(kafka_bootstrap, tag, seen).stdout
        assert str(seen) not in text, text
        assert f"consumer group generation {generation}, elasticity factor 1" in text, text
        assert f"consumer group group-{tag}-1: generation {generation}, 2 member(s); " \
               f"last rebalance" in text, text
        for m in members:
            assert f"member pid-{m.pid}@{host} (host {host}, pid {m.pid}, job.dir " \
                   f"{dirs[m.pid]}): active {', '.join(m.assignment()[1])}; lag 0" \
                   in text, text  # type: ignore[index]

        # a lag shows on the task that has it: a member stops, the other one runs every task
        # and the events not yet read are its tasks' lag
        assert members[1].stop() == 0
        wait_for("one member runs every task", lambda: settled(members[:1], 4), 60, members[:1])
        g = wait_for("status shows one member", lambda: (lambda g: g if len(g["members"]) == 1
                     and g["generation"] > generation else False)(
                         _group(kafka_bootstrap, tag, seen)), 30, members[:1])
        assert g["members"][0]["pid"] == members[0].pid and len(g["members"][0]["active"]) == 4
        assert g["gone"] == [], g  # it stopped cleanly: it said it left
    finally:
        codes = [m.stop() for m in members if m.alive()]
    assert all(c == 0 for c in codes), [m.text()[-2000:] for m in members]


def test_a_member_killed_earlier_is_no_owner_after_the_survivor_stopped(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """A member killed (SIGKILL: it never said it left) and a survivor that took its tasks and
    then stopped cleanly: status names the killed member as gone and no task's owner."""
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag) for i in range(2)]
    seen = tmp_path / "elsewhere"
    try:
        wait_for("two members split the tasks", lambda: settled(members, 4), 60, members)
        generation = members[0].assignment()[0]  # type: ignore[index]
        # each member's record is in the checkpoint topic (a member logs its share before it
        # writes it: on a busy machine a kill can come in between)
        wait_for("status shows both members", lambda: len(
            _group(kafka_bootstrap, tag, seen)["members"]) == 2, 30, members)
        killed = members[1]
        killed.kill()
        wait_for("the survivor runs every task", lambda: settled(members[:1], 4), 60,
                 members[:1])
        wait_for("status shows the survivor alone", lambda: (lambda g: len(g["members"]) == 1
                 and g["generation"] > generation)(_group(kafka_bootstrap, tag, seen)), 30,
                 members[:1])
        assert members[0].stop() == 0
        g = _group(kafka_bootstrap, tag, seen)
        host = socket.gethostname()
        assert g["members"] == [], g  # the survivor left; the killed member owns nothing
        assert g["gone"] == [f"pid-{killed.pid}@{host}"], g
        assert all(t["member"] is None for t in g["tasks"]), g
        text = _status(kafka_bootstrap, tag, seen).stdout
        assert "0 member(s)" in text, text
        assert text.count(f"pid-{killed.pid}") == 1, text  # in the line of those gone only
        assert f"gone (not in the latest generation): pid-{killed.pid}@{host}" in text, text
    finally:
        for m in members:
            if m.alive():
                m.stop()


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_job_page_of_a_member_shows_the_group_in_chromium(kafka_bootstrap: str,
                                                               tmp_path: Path) -> None:
    """Two members; the page of one (``--ui``) shows the generation, both members and their
    tasks, the last rebalance and how long it took, and the lag of each task it runs (the other
    member's are on its own page, and in ``samza-dsl status``)."""
    from playwright.sync_api import sync_playwright

    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    port = _free_port()
    members = [Member(tmp_path / "host-0", kafka_bootstrap, tag, "--ui", f"127.0.0.1:{port}"),
               Member(tmp_path / "host-1", kafka_bootstrap, tag)]
    try:
        wait_for("two members split the tasks", lambda: settled(members, 4), 60, members)
        generation, mine = members[0].assignment()  # type: ignore[misc]
        _, theirs = members[1].assignment()  # type: ignore[misc]
        run(produce_each(kafka_bootstrap, f"gevents-{tag}",
                         keyed(((f"k{i % 20}", {"i": i}) for i in range(200)), 4)))
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{port}/")
                page.wait_for_function(
                    "() => !document.getElementById('group').hidden && document.querySelectorAll("
                    "'#gtasks tbody tr').length === 4 && [...document.querySelectorAll("
                    "'#gtasks td.lag')].filter(td => td.textContent === '0').length === 2",
                    timeout=60_000)
                summary = page.text_content("#gsum") or ""
                members_rows = page.eval_on_selector_all(
                    "#gmembers tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))")
                task_rows = page.eval_on_selector_all(
                    "#gtasks tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))")
            finally:
                browser.close()
        host = socket.gethostname()
        assert summary.startswith(f"generation {generation} · this page: "
                                  f"pid-{members[0].pid}@{host} on {host}"), summary
        assert "last rebalance" in summary and " ago, took " in summary, summary
        # every member, named as status names it (pid-N@host), and its tasks
        assert sorted(r[1] for r in members_rows) == sorted([", ".join(mine), ", ".join(theirs)])
        for m, tasks in ((members[0], mine), (members[1], theirs)):
            row = next(r for r in members_rows if r[1] == ", ".join(tasks))
            assert row[0] == f"pid-{m.pid}@{host}", members_rows
        assert [r[0] for r in task_rows] == [f"Partition {p}" for p in range(4)]
        assert {r[0]: r[2] for r in task_rows} == {t: "0" if t in mine else "–"
                                                   for t in mine + theirs}, task_rows
    finally:
        codes = [m.stop() for m in members]
    assert codes == [0, 0], [m.text()[-2000:] for m in members]
