"""The job page, ``samza-dsl status``, the Prometheus endpoint and the run's summary give the
same numbers, each the run's true one: a job with a known number of late messages over four
tasks (``late_app.py``), watched through all four at once while it runs."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.runtime.test_ui import ROOT, browser, cli, free_port, get_json, stop, wait_for

__all__ = ["browser"]

HERE = Path(__file__).resolve().parent
LATE_APP = str(HERE / "late_app.py") + ":app"
WINDOW = "latecount-1-window-per-key"
sys.path.insert(0, str(HERE))
from late_app import LATE, PARTITIONS, PER_PARTITION  # noqa: E402

TOTAL_LATE = sum(LATE.values())
MESSAGES = PARTITIONS * PER_PARTITION


def first_event(url: str) -> dict[str, Any]:
    """The first state the page's ``/events`` feed sends."""
    with urllib.request.urlopen(url + "events", timeout=10) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data: "):
                return dict(json.loads(line[len("data: "):]))
    raise AssertionError("the /events feed sent nothing")


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def status_json(job_dir: Path, cwd: Path) -> dict[str, Any]:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    got = subprocess.run([sys.executable, "-m", "runtime.ops.cli", "status", LATE_APP, "--json",
                          "-c", f"job.dir={job_dir}"], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    return dict(json.loads(got.stdout))


def _written(state: dict[str, Any]) -> dict[tuple[str, str], float]:
    now = state["time"] / 1000.0
    return {(p["stream"], p["partition"]): now - p["checkpoint_age_s"]
            for p in state["partitions"]}


def same_checkpoint(url: str, job_dir: Path, cwd: Path
                    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The page's state and ``status --json`` read between two of the page's samples that
    show the same checkpoints (no commit came between them); None when one came."""
    before = get_json(url + "api/state")
    status = status_json(job_dir, cwd)
    time.sleep(1.2)  # the page samples once a second: the next is after the status
    after = get_json(url + "api/state")
    old, new = _written(before), _written(after)
    if any(abs(old[k] - new[k]) > 0.15 for k in new):
        return None
    return after, status


def settled(url: str) -> dict[str, Any] | None:
    s = get_json(url + "api/state")
    w = s["operators"].get(WINDOW)
    if not s.get("plan_ready") or w is None or w["late"] < TOTAL_LATE:
        return None
    c = s["containers"][0] if s["containers"] else {}
    if not c.get("commits") or c.get("processed") != MESSAGES:
        return None
    parts = [p for p in s["partitions"] if p["kind"] == "input"]
    if len(parts) != PARTITIONS or any(p["lag"] or p["checkpoint_age_s"] is None for p in parts):
        return None
    return dict(s)


def test_late_counts_checkpoint_age_commits_and_processed_agree_everywhere(
        tmp_path: Path, browser: Any) -> None:
    port, prom = free_port(), free_port()
    job_dir = tmp_path / "job"
    proc = cli("run", LATE_APP, "--sample", str(MESSAGES), "--follow", "-q",
               "--ui", f"127.0.0.1:{port}", "-c", f"job.dir={job_dir}",
               "-c", "task.commit.ms=5000", "-c", "metrics.reporters=prometheus,snapshot",
               "-c", "metrics.reporter.interval.ms=300",
               "-c", f"metrics.reporter.prometheus.port={prom}", cwd=tmp_path)
    url = f"http://127.0.0.1:{port}/"
    try:
        state = wait_for("the run to settle", lambda: settled(url), proc=proc)
        # the page's feed: the window's late messages, the run's true number, not 4 times it
        event = first_event(url)
        assert event["operators"][WINDOW]["late"] == TOTAL_LATE
        assert state["operators"][WINDOW]["late"] == TOTAL_LATE
        # nothing is in flight in an idle job: no operator says otherwise
        assert {o["in_flight"] for o in event["operators"].values()} == {0}
        cont = event["containers"][0]
        assert cont["processed"] == MESSAGES  # no end-of-stream record counted
        assert cont["commits"] > 0 and cont["last_commit_s"] is not None
        # Prometheus: per task, the task's own late messages, summing to the total
        metrics = scrape(prom)
        late = {labels["task"]: v for labels, v in
                metrics["samza_operator_late_messages_dropped_total"]
                if labels["operator"] == WINDOW}
        assert late == {f"Partition {p}": float(n) for p, n in LATE.items()}
        assert sum(late.values()) == TOTAL_LATE and late["Partition 3"] == 0
        processed = {labels["task"]: v for labels, v in
                     metrics["samza_task_messages_actually_processed_total"]}
        assert processed == {f"Partition {p}": float(PER_PARTITION) for p in range(PARTITIONS)}
        envelopes = metrics["samza_container_process_envelopes_total"][0][1]
        assert envelopes == MESSAGES
        commits = metrics["samza_container_commit_calls_total"][0][1]
        assert commits > 0
        # status: the same late messages and processed (from the job's last metrics snapshot),
        # checkpoint (when it was written) and lag as the page
        status = wait_for("status to see the snapshot", lambda: (s := status_json(
            job_dir, tmp_path))["metrics"] and s["metrics"]["late_dropped"].get(WINDOW) and s)
        assert status["metrics"]["late_dropped"] == {WINDOW: TOTAL_LATE}
        assert status["metrics"]["processed"] == MESSAGES
        page, status = wait_for("a status between two samples of the page with no commit "
                                "between them", lambda: same_checkpoint(url, job_dir, tmp_path))
        rows = {(r["stream"], str(r["partition"])): r for r in status["partitions"]}
        for p in page["partitions"]:
            row = rows[(p["stream"], p["partition"])]
            assert p["lag"] == row["lag"] == 0
            # the age rounded to 0.1 s: the same checkpoint, as written
            written = page["time"] / 1000.0 - p["checkpoint_age_s"]
            assert abs(written - row["checkpoint_written"]) < 0.15, (p, row)
        assert page["checkpoint_age_s"] == max(p["checkpoint_age_s"] for p in page["partitions"])
        # Chromium: the page as a person sees it
        view = browser.new_page(viewport={"width": 1500, "height": 1000})
        view.goto(url)
        view.wait_for_function("() => document.querySelector('#dag svg g.live.late') !== null",
                               timeout=30_000)
        seen = view.evaluate("""() => ({
            late: Object.fromEntries([...document.querySelectorAll('#ops tbody tr')].map(
                r => [r.dataset.op, r.children[6].textContent])),
            inflight: Object.fromEntries([...document.querySelectorAll('#ops tbody tr')].map(
                r => [r.dataset.op, r.children[4].textContent])),
            badge: [...document.querySelectorAll('#dag g.live.late')].map(g => g.textContent),
            conts: [...document.querySelectorAll('#conts tbody tr')].map(
                r => [...r.children].map(c => c.textContent)),
            cpage: document.getElementById('cpage').textContent,
        })""")
        assert seen["late"][WINDOW] == str(TOTAL_LATE)
        assert any(f"late dropped {TOTAL_LATE}" in b for b in seen["badge"]), seen["badge"]
        assert all("in flight" not in b for b in seen["badge"])
        assert seen["conts"][0][3] == str(MESSAGES) and int(seen["conts"][0][4]) > 0
        assert re.fullmatch(r"\d+ s", seen["cpage"]), seen["cpage"]
        shot = tmp_path / "page.png"
        view.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        if os.environ.get("SAMZA_PAGE_SCREENSHOT"):  # to look at it
            shutil.copy(shot, os.environ["SAMZA_PAGE_SCREENSHOT"])
        view.close()
    finally:
        out, err = stop(proc)
    assert proc.returncode == 0, err
    # the summary: the same numbers
    assert f"in: {MESSAGES} new message(s)" in out, out
    assert f"late: {TOTAL_LATE} message(s) dropped by window {WINDOW}" in out, out


def _kv_app(name: str, config: dict[str, Any] | None = None) -> Any:
    from samza_dsl import StreamApplication
    from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
    from samza_dsl.systems import LocalSystem

    serde = KVSerde(StringSerde(), JsonSerde())
    app = StreamApplication(name, config={"task.commit.ms": 100, **(config or {})})
    local = LocalSystem("local")
    events = app.input(local.input("events", serde=serde, partitions=1))
    out = app.output(local.output("out", serde=serde, partitions=1))
    return app, events, out


def test_a_bounded_run_of_100_messages_processed_100_not_its_end_of_stream(
        tmp_path: Path) -> None:
    from runtime import LocalRunner
    from samza_dsl import KV

    app, events, out = _kv_app("bounded")
    events.map(lambda kv: kv, name="same").send_to(out)
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")},
                         inputs={"events": [KV(f"k{i}", {"i": i}) for i in range(100)]}).run()
    samples = runner.metrics.samples()
    per_task = [v for g, n, _, v in samples if (g, n) == ("task", "messages-actually-processed")]
    envelopes = [v for g, n, _, v in samples if (g, n) == ("container", "process-envelopes")]
    assert per_task == [100] and envelopes == [100]
    assert runner.status()["processed"] == 100


def test_in_flight_is_shown_on_the_operator_that_has_it_in_flight(tmp_path: Path) -> None:
    """Four calls of an async step wait: the step shows 4 in flight, the filter before it and
    the map after it none, though all run in the same task."""
    import asyncio
    import threading

    from runtime import LocalRunner
    from runtime.ops.ui import JobView, RunnerSource
    from samza_dsl import KV

    release = threading.Event()

    async def wait(kv: KV[str, Any]) -> list[KV[str, Any]]:
        while not release.is_set():
            await asyncio.sleep(0.01)
        return [kv]

    app, events, out = _kv_app("waits", {"task.max.concurrency": 4})
    (events.filter(lambda kv: True, name="all").async_flat_map(wait, name="wait")
     .map(lambda kv: kv, name="after").send_to(out))
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")},
                         inputs={"events": [KV(f"k{i}", {"i": i}) for i in range(10)]},
                         follow=True)
    runner.start()
    view = JobView()
    try:
        def four_waiting() -> dict[str, Any] | None:
            view.add(RunnerSource(runner).poll())
            ops = view.state()["operators"]
            return ops if ops.get("waits-1-async_flat_map-wait", {}).get("in_flight") == 4 \
                else None

        ops = wait_for("four calls in flight", four_waiting, timeout=30)
        assert ops["waits-1-filter-all"]["in_flight"] == 0
        assert ops["waits-1-map-after"]["in_flight"] == 0
        release.set()
        ops = wait_for("all done", lambda: (view.add(RunnerSource(runner).poll()) or True)
                       and (o := view.state()["operators"])["waits-1-map-after"]["in"] == 10
                       and o, timeout=30)
        assert {o["in_flight"] for o in ops.values()} == {0}
    finally:
        release.set()
        runner.stop(timeout=30)


def test_a_frozen_container_shows_as_stalled_not_idle(tmp_path: Path) -> None:
    """``run --containers 2 --follow``: one container process stopped (SIGSTOP) while input
    comes for its partitions is shown as stalled on its progress line and on the page, and the
    run warns once, naming the container, its pid, its partitions and their lag."""
    import signal
    import threading

    from runtime.local.system import LocalJob
    from runtime.ops.loader import load_app
    from tests.runtime.test_ui import CLICKS, _clicks_sample

    port = free_port()
    job_dir = tmp_path / "job"
    proc = cli("run", CLICKS, "--sample", "2000", "--follow", "--containers", "2",
               "--ui", f"127.0.0.1:{port}", "-c", f"job.dir={job_dir}",
               "-c", "task.progress.ms=250", cwd=tmp_path)
    lines: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    url = f"http://127.0.0.1:{port}/"
    frozen = None
    try:
        state = wait_for("both containers", lambda: (s := get_json(url + "api/state"))
                         and len([c for c in s["containers"] if c.get("processed")]) == 2
                         and s, proc=proc)
        states = {c["name"]: c["state"] for c in state["containers"]}
        frozen = int(re.fullmatch(r"running \(pid (\d+)\)", states["container-1"]).group(1))
        os.kill(frozen, signal.SIGSTOP)
        app = load_app(CLICKS)
        job = LocalJob(app, {"job.dir": str(job_dir)}, run=False)
        try:
            job.load("clicks", _clicks_sample()(10_000, start=1_700_000_100.0))
        finally:
            job.close()
        warning = wait_for("the warning", lambda: [ln for ln in list(lines)
                                                    if ln.startswith("warning: container 1 ")],
                           timeout=60, proc=proc)
        assert len(warning) == 1
        assert f"container 1 (pid {frozen}) is stalled" in warning[0]
        assert re.search(r"clicks:\d lag [\d,]+", warning[0]), warning[0]
        row = wait_for("the progress line", lambda: [
            ln for ln in list(lines) if ln.startswith("container 1 of 2: ") and "stalled" in ln])
        assert f"pid {frozen}" in row[-1] and "lag" in row[-1]
        page = wait_for("the page", lambda: (s := get_json(url + "api/state")) and
                        "stalled" in {c["name"]: c["state"] for c in s["containers"]}
                        ["container-1"] and s, timeout=30, proc=proc)
        conts = {c["name"]: c["state"] for c in page["containers"]}
        assert f"(pid {frozen}) is stalled" in conts["container-1"]
        assert "lag" in conts["container-1"] and "stalled" not in conts["container-0"]
        os.kill(frozen, signal.SIGCONT)
        wait_for("container 1 to report again", lambda: {
            c["name"]: c["state"] for c in get_json(url + "api/state")["containers"]}
            ["container-1"].startswith("running"), timeout=30, proc=proc)
    finally:
        if frozen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen, signal.SIGCONT)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reader.join(10)
    assert proc.returncode == 0, "".join(lines)


def test_no_last_commit_is_shown_before_the_first_commit() -> None:
    """A container that has not committed yet shows 0 commits and no last commit; once it has,
    the time since its commit ended (as the container reports it), not since the page saw it."""
    from runtime.ops.ui import JobView

    view = JobView()
    now = time.time()
    view.add([("container-0", int(now * 1000) - 2000,
               [("container", "commit-calls", {}, 0), ("container", "process-envelopes", {}, 5)])])
    state = view.state(now=now)["containers"][0]
    assert state["commits"] == 0 and state["last_commit_s"] is None
    view.add([("container-0", int(now * 1000) - 1000,
               [("container", "commit-calls", {}, 1),
                ("container", "last-commit-ms", {}, int(now * 1000) - 21_000)])])
    state = view.state(now=now)["containers"][0]
    assert state["commits"] == 1 and state["last_commit_s"] == 21.0
