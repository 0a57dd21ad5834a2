"""The job page of a job on Kafka run as a consumer group of two ``samza-dsl run --follow --ui``
processes, opened in Chromium at 1400 x 1000: each member's page draws the plan with every
stage labelled as run by Kafka, its group, and the partitions of its own tasks with the numbers
``samza-dsl status --json`` gives at that moment; its first answer alone carries them. A
screenshot of each member's page goes to ``artifacts/job-page/`` (named by the broker's kind)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from group_helpers import APPS, CLI, Member, kill_left, outputs, settled, stop_all, wait_for
from kafka_helpers import create_topic, keyed, produce_each, run

from tests.page_helpers import (
    VIEWPORT,
    chromium,
    drawn,
    inside_viewport,
    page_numbers,
    screenshot,
    status_numbers,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _state(url: str) -> Any:
    with urllib.request.urlopen(url + "api/state", timeout=5) as resp:
        return json.loads(resp.read())


def _status(bootstrap: str, tag: str, folder: Path) -> dict[str, Any]:
    env = {**os.environ, "SAMZA_TEST_BOOTSTRAP": bootstrap, "SAMZA_TEST_TAG": tag}
    out = subprocess.run([CLI, "status", f"{APPS}:group", "-c", f"job.dir={folder}", "--json"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got: dict[str, Any] = json.loads(out.stdout)
    return got


def _seen_by(members: list[Member], urls: list[str], bootstrap: str, tag: str) -> str:
    """The outputs counted and each member's own numbers of its partitions, for a failure."""
    lines = [f"outputs: {len(outputs(bootstrap, tag))}"]
    for member, url in zip(members, urls, strict=True):
        try:
            s = _state(url)
            lines.append(f"member {member.pid}: headline {s.get('headline')}, partitions "
                         f"{page_numbers(s)}")
        except (OSError, ValueError, KeyError) as exc:
            lines.append(f"member {member.pid}: its page did not answer: {exc}")
    return "\n".join(lines)


def test_each_members_page_draws_the_plan_its_group_and_the_numbers_status_gives(
        kafka_bootstrap: str, kafka_broker_kind: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    ports = [_free_port(), _free_port()]
    # no commit while the test looks: the lag since the checkpoint holds still
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag, "--ui", f"127.0.0.1:{port}",
                      "-c", "task.commit.ms=600000") for i, port in enumerate(ports)]
    urls = [f"http://127.0.0.1:{port}/" for port in ports]
    seen_from = tmp_path / "elsewhere"
    try:
        wait_for("two members split the tasks", lambda: settled(members, 4), 90, members)
        run(produce_each(kafka_bootstrap, f"gevents-{tag}",
                         keyed(((f"k{i % 20}", {"i": i}) for i in range(200)), 4)))
        try:
            wait_for("every event is counted",
                     lambda: len(outputs(kafka_bootstrap, tag)) >= 200, 90, members)
        except AssertionError as exc:  # what each member's page says of its partitions then
            raise AssertionError(f"{exc}\n{_seen_by(members, urls, kafka_bootstrap, tag)}") \
                from None
        with chromium() as browser:
            for i, (member, url) in enumerate(zip(members, urls, strict=True)):
                tasks = member.assignment()[1]  # type: ignore[index]
                def caught_up(url: str = url) -> bool:
                    s = _state(url)
                    return bool(s["plan_ready"] and s["group"] and len(page_numbers(s)) == 2
                                and s["headline"]["behind"] == 0 and s["headline"]["end"] > 0)
                wait_for(f"member {i}'s page shows its tasks' partitions, caught up", caught_up,
                         60, members)
                page = browser.new_page(viewport=VIEWPORT)
                page.route("**/events", lambda route: route.abort())
                page.route("**/plan.svg", lambda route: route.abort())
                for _ in range(5):  # until the page's snapshot and status agree on the moment
                    page.goto(url)
                    seen = drawn(page)
                    status = _status(kafka_bootstrap, tag, seen_from)
                    if page_numbers(seen["state"]) == page_numbers(_state(url)):
                        break
                assert not seen["waiting"] and seen["updates"] == 1, seen
                assert seen["stages"] == ["stage-0\nruns on Kafka"], seen["stages"]
                state = seen["state"]
                assert seen["shown"] == seen["expected"], seen
                mine = page_numbers(state)
                assert status_numbers(status, set(mine)) == mine, (state, status)
                assert {r["task"] for r in status["partitions"]
                        if (r["stream"], int(r["partition"])) in mine} == set(tasks)
                head = state["headline"]
                assert head["lag"] == sum(lag for lag, _ in mine.values())
                assert head["end"] == sum(end for _, end in mine.values()) > 0
                assert head["behind"] == 0
                g = state["group"]
                assert len(g["tasks"]) == 4 and len(g["members"]) == 2, g
                # the group's members are named as status names them: pid-N@host
                assert [m["active"] for m in g["members"]
                        if m["member"] == f"pid-{member.pid}@{socket.gethostname()}"] \
                    == [tasks], g
                assert g["member"] == f"pid-{member.pid}@{socket.gethostname()}", g
                page.close()
                # live, with the group
                page = browser.new_page(viewport=VIEWPORT)
                page.goto(url)
                page.wait_for_function("() => (window.__updates || 0) >= 2", timeout=30_000)
                assert page.evaluate("() => document.getElementById('group').hidden") is False
                # the member reads 2 of the input's 4 partitions, and says so beside the plan's 4
                parts = page.evaluate("""() => document.querySelector(
                    '#streams tr[data-stream="events"] .parts')?.textContent""")
                assert parts == f"{len(tasks)} of 4", parts
                ok, box = inside_viewport(page, "#ops")
                assert ok, box
                screenshot(page, f"kafka-group-member-{i}-{kafka_broker_kind}")
                page.close()
        stop_all(members)
    finally:
        kill_left(members)
