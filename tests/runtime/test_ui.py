"""The live job page (``runtime.ops.ui``): a job run with ``--ui``, looked at in a real headless
Chromium as a person would see it; its JSON state; and ``samza-dsl ui`` reading a job's snapshot
stream and a Prometheus endpoint. Chromium and the local log are real: nothing here skips."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.ops.ui import SnapshotSource
from tests.page_helpers import chromium

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "examples" / "page_view_counts.py") + ":app"
JOB = "page-view-counts-1"
#: a job with a slow step (``ui_app.py``), so loaded bursts show as lag
CLICKS = str(Path(__file__).resolve().parent / "ui_app.py") + ":app"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "runtime.ops.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[str, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def wait_for(what: str, check: Any, timeout: float = 60, proc: Any = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()
        except (OSError, KeyError, ValueError):
            got = None
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process ended: {proc.communicate()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def feeder(job_dir: Path, stop_event: threading.Event, batches: list[int]) -> threading.Thread:
    """Loads clicks into the running job's input in bursts, one every 0.8 s until stopped."""
    from runtime.local.system import LocalJob
    from runtime.ops.loader import load_app

    app = load_app(CLICKS)
    module = sys.modules.get(app.__module__)
    sample = getattr(module, "sample_input", None) or _clicks_sample()

    def run() -> None:
        job = LocalJob(app, {"job.dir": str(job_dir)}, run=False)
        try:
            start = 1_700_000_100.0
            while not stop_event.is_set():
                n = 4_000 if len(batches) % 2 == 0 else 600
                job.load("clicks", sample(n, start=start))
                start += n * 0.01
                batches.append(n)
                stop_event.wait(0.8)
        finally:
            job.close()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _clicks_sample() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("ui_app", CLICKS.rpartition(":")[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.sample_input


def page_numbers(page: Any) -> dict[str, Any]:
    return page.evaluate("""() => ({
        updates: window.__updates || 0,
        rates: Object.fromEntries([...document.querySelectorAll('#ops tbody tr')].map(
            r => [r.dataset.op, r.querySelector('.rate').textContent])),
        lags: Object.fromEntries([...document.querySelectorAll('#streams tbody tr')].map(
            r => [r.dataset.stream, r.querySelector('.lag').textContent])),
        cells: [...document.querySelectorAll('#inputs svg.strip rect')].length,
        badges: [...document.querySelectorAll('#dag g.live')].map(
            g => [g.dataset.op ? 'op:' + g.dataset.op : 'stream:' + g.dataset.stream, g.textContent]),
        nodes: [...document.querySelectorAll('#dag svg g.node')].map(g => g.id),
    })""")


def end_run(proc: subprocess.Popen[str], stop_feeding: threading.Event,
            loader: threading.Thread | None) -> str:
    """Stops the feeder and the ``run --ui`` process; its standard error."""
    stop_feeding.set()
    if loader is not None:
        loader.join(30)
    return stop(proc)[1]


def test_a_job_run_with_ui_shows_its_dag_rates_and_lag_live_in_chromium(tmp_path: Path,
                                                                        browser: Any) -> None:
    from runtime.ops.loader import load_app

    app = load_app(CLICKS)
    port = free_port()
    job_dir = tmp_path / "job"
    proc = cli("run", CLICKS, "--sample", "2000", "--follow", "-q", "--ui", f"127.0.0.1:{port}",
               "-c", f"job.dir={job_dir}", "-c", "task.commit.ms=2000", cwd=tmp_path)
    stop_feeding = threading.Event()
    loader: threading.Thread | None = None
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_for("the page's state", lambda: get_json(url + "api/state")["plan_ready"],
                 proc=proc)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.goto(url)
        page.wait_for_function("() => document.querySelector('#dag svg g.live') !== null",
                               timeout=30_000)
        batches: list[int] = []
        loader = feeder(job_dir, stop_feeding, batches)
        plan = app.plan(config={"job.dir": str(job_dir)})
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            seen.append(page_numbers(page))
            rates = {tuple(sorted(s["rates"].items())) for s in seen}
            lags = [s["lags"].get("clicks", "0") for s in seen]
            if len(batches) >= 4 and len(rates) >= 3 and len(set(lags)) >= 3 \
                    and any(v != "0" for v in lags) \
                    and seen[-1]["updates"] > seen[0]["updates"] + 3:
                break
            time.sleep(0.25)
        first, last = seen[0], seen[-1]
        assert last["updates"] > first["updates"] + 3, "the page did not update by itself"
        # the DAG: the plan's drawing with every operator, each metered one annotated live
        for op in plan.app.operators:
            assert op.op_id in last["nodes"], f"{op.op_id} is not in the drawing"
        metered = [op for op in last["rates"]]
        assert "clicks-1-map-section" in metered
        badges = dict(last["badges"])
        for op in metered:
            text = badges["op:" + op]
            assert "/s" in text and "µs" in text
        assert badges["stream:clicks"].startswith("behind ")  # the input stream's node
        # the intermediate stream's edge
        assert badges["stream:clicks-1-partition_by-by-page"].startswith("behind ")
        # rates and lag moved while the page was open, without a reload
        filter_rates = {s["rates"].get("clicks-1-map-section") for s in seen}
        assert len(filter_rates) >= 3, filter_rates
        assert any(r not in ("0", None) for r in filter_rates)
        lags = {s["lags"].get("clicks") for s in seen}
        assert len(lags) >= 3 and lags - {"0"}, lags
        assert last["cells"] == 4  # a cell per input partition, in the stream's one row
        assert page.evaluate("() => document.querySelectorAll('#inputs tbody tr').length") == 1
        # late clicks, dropped by the window, on its node
        page.wait_for_function("() => [...document.querySelectorAll('#dag g.live.late')].length"
                               " > 0", timeout=30_000)
        shot = tmp_path / "job-page.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        if os.environ.get("SAMZA_UI_SCREENSHOT"):  # how docs/job-page.png is made
            shutil.copy(shot, os.environ["SAMZA_UI_SCREENSHOT"])
        page.close()
    finally:
        err = end_run(proc, stop_feeding, loader)
    assert proc.returncode == 0, err
    assert f"job page: http://127.0.0.1:{port}/" in err


def test_a_run_of_two_containers_with_ui_shows_both_and_their_numbers(tmp_path: Path) -> None:
    """``run --containers 2 --ui``: the page reads the snapshot stream the two container
    processes write, shows both with their states, and its numbers move as clicks come."""
    port = free_port()
    job_dir = tmp_path / "job"
    proc = cli("run", CLICKS, "--sample", "2000", "--follow", "-q", "--containers", "2",
               "--ui", f"127.0.0.1:{port}", "-c", f"job.dir={job_dir}", cwd=tmp_path)
    stop_feeding = threading.Event()
    loader: threading.Thread | None = None
    try:
        url = f"http://127.0.0.1:{port}/"
        first = wait_for("both containers' snapshots", lambda: (
            s := get_json(url + "api/state"))["plan_ready"]
            and {c["name"] for c in s["containers"] if c.get("processed") is not None}
            >= {"container-0", "container-1"} and s, proc=proc)
        assert first["source"] == "containers"
        states = {c["name"]: c["state"] for c in first["containers"]}
        assert states["container-0"].startswith("running (pid ")
        assert states["container-1"].startswith("running (pid ")
        assert first["operators"]["clicks-1-map-section"]["in"] >= 0
        batches: list[int] = []
        loader = feeder(job_dir, stop_feeding, batches)
        later = wait_for("the numbers to move", lambda: (s := get_json(url + "api/state"))
                         ["operators"]["clicks-1-map-section"]["in"]
                         > first["operators"]["clicks-1-map-section"]["in"] + 1000 and s,
                         proc=proc)
        assert sum(c["processed"] for c in later["containers"]) > \
            sum(c["processed"] for c in first["containers"])
        assert later["streams"]["clicks"]["kind"] == "input"
    finally:
        err = end_run(proc, stop_feeding, loader)
    assert proc.returncode == 0, err
    assert f"job page: http://127.0.0.1:{port}/" in err


def test_the_state_as_json_and_nothing_that_changes_the_job(tmp_path: Path) -> None:
    from examples.page_view_counts import app, sample_input
    from runtime.ops.ui import RunnerSource, UIServer
    from runtime.runner import LocalRunner

    runner = LocalRunner(app, {"job.dir": str(tmp_path)}, inputs=sample_input(3000), follow=True)
    runner.start()
    server = UIServer(RunnerSource(runner), lambda: getattr(runner, "plan", None),
                      JOB, "127.0.0.1", 0, interval=0.2)
    try:
        url = server.start()
        assert url.startswith("http://127.0.0.1:")
        state = wait_for("operators", lambda: (s := get_json(url + "api/state"))["operators"]
                         and s["operators"]["page-view-counts-1-filter-humans"]["in"] == 3000
                         and s)
        ops = state["operators"]
        assert set(ops) <= {op.op_id for op in runner.plan.app.operators}
        f = ops["page-view-counts-1-filter-humans"]
        assert f["out"] < f["in"] and f["handle_us"] > 0 and f["in_flight"] >= 0
        assert "late" in ops["page-view-counts-1-window-views-per-window"]
        views = state["streams"]["page-views"]
        # all processed (behind 0); lag counts from the checkpoint, which may not have moved yet
        assert views == {**views, "behind": 0, "kind": "input", "partitions": 4}
        assert 0 <= views["lag"] <= 3000
        assert state["streams"]["page-view-counts-1-partition_by-by-page-country"]["kind"] == \
            "intermediate"
        parts = [p for p in state["partitions"] if p["kind"] == "input"]
        assert sorted((p["stream"], p["partition"]) for p in parts) == \
            [("logins", "0"), ("logins", "1")] + [("page-views", str(i)) for i in range(4)]
        assert all(p["behind"] == 0 and p["end"] >= p["lag"] for p in parts)
        history = state["streams"]["page-views"]["history"]
        assert history and history[-1][0] <= 0 and history[-1][1] == 0
        assert state["headline"] == {**state["headline"], "behind": 0,
                                     "lag": views["lag"] + state["streams"]["logins"]["lag"]}
        assert state["containers"][0]["name"] == "samza-container-0"
        assert state["containers"][0]["state"] == "running"
        assert state["source"] == "in-process" and state["job"] == JOB
        assert "page-view-counts-1-partition_by-by-page-country" in \
            state["intermediate_edges"].values()
        svg = urllib.request.urlopen(url + "plan.svg", timeout=5).read().decode()
        assert svg.startswith("<svg") and "filter&#45;humans" in svg
        # read-only: GET only
        for method in ("POST", "PUT", "DELETE"):
            for path in ("", "api/state", "events", "plan.svg"):
                req = urllib.request.Request(url + path, method=method, data=b"x")
                with pytest.raises(urllib.error.HTTPError) as e:
                    urllib.request.urlopen(req, timeout=5)
                assert e.value.code == 405
    finally:
        server.stop()
        runner.stop()
        runner.close()


def snapshot(t_ms: int, n_in: int, lag: int, container: str = "samza-container-0") -> bytes:
    from runtime.host.metrics import snapshot_record

    op = {"task": "Partition 0", "operator": "page-view-counts-1-filter-humans"}
    part = {"task": "Partition 0", "stream": "page-views", "partition": "0"}
    samples = [("container", "process-envelopes", {}, n_in),
               ("container", "commit-calls", {}, n_in // 100),
               ("task", "messages-in-flight", {"task": "Partition 0"}, 3),
               ("operator", "messages-in-flight", op, 3),
               ("task", "lag", part, lag), ("task", "next-offset", part, n_in),
               ("task", "checkpointed-offset", part, n_in - 1),
               ("operator", "messages-in", op, n_in), ("operator", "messages-out", op, n_in),
               ("operator", "handle-ns", op, n_in * 2000)]
    header = {"job-name": JOB, "container-name": container, "time": t_ms}
    return json.dumps(snapshot_record(samples, header)).encode()


def test_ui_reads_the_jobs_snapshot_stream(tmp_path: Path) -> None:
    from runtime.local.log import LocalLog

    port = free_port()
    proc = cli("ui", APP, "--ui", f"127.0.0.1:{port}", "-c", f"job.dir={tmp_path}", cwd=tmp_path)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_for("the page", lambda: get_json(url + "api/state")["plan_ready"], proc=proc)
        now = int(time.time() * 1000)
        with LocalLog(tmp_path / "logs" / "local") as log:
            log.create(f"{JOB}-metrics", 1)
            log.append(f"{JOB}-metrics", 0, [(None, snapshot(now - 2000, 1000, 50), None),
                                             (None, snapshot(now - 1000, 1500, 80), None)])
        state = wait_for("the snapshots", lambda: (s := get_json(url + "api/state"))
                         ["operators"] and s, proc=proc)
        f = state["operators"]["page-view-counts-1-filter-humans"]
        assert f["rate"] == 500.0 and f["in"] == 1500 and f["in_flight"] == 3
        assert f["handle_us"] == pytest.approx(2.0)
        assert state["streams"]["page-views"]["lag"] == 80
        assert [n for _, _, n in state["streams"]["page-views"]["history"]] == [50, 80]
        assert state["containers"][0]["name"] == "samza-container-0"
        assert state["source"] == "stream"
        with LocalLog(tmp_path / "logs" / "local") as log:  # a later one moves the numbers
            log.append(f"{JOB}-metrics", 0, [(None, snapshot(now, 1600, 10), None)])
        state = wait_for("the next snapshot", lambda: (s := get_json(url + "api/state"))
                         ["streams"]["page-views"]["lag"] == 10 and s, proc=proc)
        assert state["operators"]["page-view-counts-1-filter-humans"]["rate"] == 100.0
    finally:
        out, err = stop(proc)
    assert proc.returncode == 0, err
    assert f"http://127.0.0.1:{port}/" in err


def test_ui_reads_a_prometheus_endpoint(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    scrapes = []

    class Job:
        def collect(self) -> Iterator[Any]:
            scrapes.append(time.time())
            n = 1000 * len(scrapes)
            c = CounterMetricFamily("samza_operator_messages_in", "messages in",
                                    labels=["job", "container", "task", "operator"])
            c.add_metric([JOB, "samza-container-0", "Partition 0",
                          "page-view-counts-1-filter-humans"], n)
            yield c
            lag = GaugeMetricFamily("samza_task_lag", "lag",
                                    labels=["job", "container", "task", "stream", "partition"])
            lag.add_metric([JOB, "samza-container-0", "Partition 0", "page-views", "0"],
                           len(scrapes))
            yield lag

    registry = CollectorRegistry()
    registry.register(Job())
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    port = free_port()
    metrics_url = f"http://127.0.0.1:{server.server_port}/metrics"
    proc = cli("ui", APP, "--from", metrics_url, "--ui", f"127.0.0.1:{port}", cwd=tmp_path)
    try:
        url = f"http://127.0.0.1:{port}/"
        state = wait_for("a rate", lambda: (s := get_json(url + "api/state"))["operators"]
                         .get("page-view-counts-1-filter-humans", {}).get("rate") and s,
                         proc=proc)
        assert state["source"] == "prometheus"
        assert state["streams"]["page-views"]["lag"] >= 1
        assert state["containers"][0] == {**state["containers"][0],
                                          "name": "samza-container-0", "state": "up"}
        later = wait_for("the lag moving", lambda: (s := get_json(url + "api/state"))
                         ["streams"]["page-views"]["lag"] > state["streams"]["page-views"]["lag"]
                         and s, proc=proc)
        assert later["operators"]["page-view-counts-1-filter-humans"]["in"] > 1000
        assert not (tmp_path / ".samza").exists()  # it looked, and made nothing
    finally:
        out, err = stop(proc)
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert proc.returncode == 0, err


class _NoSnapshots(SnapshotSource):
    kind = "stream"

    def poll(self) -> list[Any]:
        return []

    def containers(self) -> dict[str, str]:
        return {}


def _get(port: int, path: str, host: str) -> tuple[int, str]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path, headers={"Host": host})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_the_page_answers_only_to_the_host_names_it_is_served_as() -> None:
    """A page from another site whose name resolves to 127.0.0.1 (DNS rebinding) must not read
    the job's state: any Host but the page's own names is refused."""
    from runtime.ops.ui import UIServer

    server = UIServer(_NoSnapshots(), None, JOB, "127.0.0.1", 0, interval=0.2)
    server.start()
    try:
        port = server.port
        for path in ("/api/state", "/events", "/", "/plan.svg"):
            status, body = _get(port, path, "evil.example")
            assert status == 421, (path, status)
            assert "evil.example" in body and body.count("\n") == 1
            status, _ = _get(port, path, f"evil.example:{port}")
            assert status == 421
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
            status, body = _get(port, "/api/state", host)
            assert status == 200, (host, body)
            assert json.loads(body)["job"] == JOB
    finally:
        server.stop()


def test_ui_from_prometheus_skips_a_sample_with_a_partition_that_is_no_number(
        tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.core import GaugeMetricFamily

    class Job:
        def collect(self) -> Iterator[Any]:
            lag = GaugeMetricFamily("samza_task_lag", "lag",
                                    labels=["job", "container", "task", "stream", "partition"])
            lag.add_metric([JOB, "samza-container-0", "Partition 0", "page-views", "0"], 7)
            lag.add_metric([JOB, "samza-container-0", "Partition 1", "page-views", "p1"], 9)
            yield lag

    registry = CollectorRegistry()
    registry.register(Job())
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    port = free_port()
    metrics_url = f"http://127.0.0.1:{server.server_port}/metrics"
    proc = cli("ui", APP, "--from", metrics_url, "--ui", f"127.0.0.1:{port}", cwd=tmp_path)
    try:
        url = f"http://127.0.0.1:{port}/"
        state = wait_for("the page", lambda: (s := get_json(url + "api/state"))["streams"]
                         and s, proc=proc)
        assert state["streams"]["page-views"] == {**state["streams"]["page-views"], "lag": 7,
                                                  "partitions": 1}
        time.sleep(2.5)  # more scrapes: still serving, and warned once
        assert get_json(url + "api/state")["streams"]["page-views"]["lag"] == 7
    finally:
        out, err = stop(proc)
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert proc.returncode == 0, err
    warnings = [line for line in err.splitlines() if "partition='p1'" in line]
    assert len(warnings) == 1, err
    assert "samza_task_lag" in warnings[0] and "partition number" in warnings[0]
