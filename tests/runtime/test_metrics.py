"""Samza's metrics of a running job (container, task, operator, store, producer), the user's
own through ``ctx.metrics``, and the reporters: a Prometheus endpoint, the ``<job>-metrics``
snapshot stream and a JSON file."""

from __future__ import annotations

import json
import time
import urllib.request
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from runtime import LocalRunner
from runtime.host.jobdir import metrics_stream
from runtime.local.log import LocalLog
from runtime.local.system import LocalJob
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.errors import ConfigError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

SERDE = KVSerde(StringSerde(), JsonSerde())


def _app(config: dict[str, Any] | None = None) -> StreamApplication:
    """filter keeps a third, map re-keys, a partition_by hop, an event-time window counting
    per key with one late message, a table counting per key, and the user's own counter."""
    app = StreamApplication("metered", config={"task.commit.ms": 100, **(config or {})})
    local = LocalSystem("local")
    out = app.output(local.output("out", serde=SERDE, partitions=2))
    seen = app.table("seen", serde=KVSerde(StringSerde(), JsonSerde()))

    class Count:
        def init(self, ctx: Any) -> None:
            self.table = ctx.table("seen")
            self.counter = ctx.metrics.counter("odd-users")
            self.timer = ctx.metrics.timer("count-time")

        def __call__(self, kv: KV[str, Any]) -> KV[str, Any]:
            with self.timer.time():
                n = (self.table.get(kv.key) or 0) + 1
                self.table.put(kv.key, n)
                if int(kv.key) % 2:
                    self.counter.inc()
            return kv

    thirds = (app.input(local.input("events", serde=SERDE, partitions=2))
              .filter(lambda kv: kv.value["i"] % 3 == 0, name="third")
              .map(lambda kv: KV(str(kv.value["i"] % 5), kv.value), name="rekey")
              .partition_by(lambda kv: kv.key, lambda kv: kv.value, serde=SERDE, name="by"))
    thirds.map(Count(), name="count")
    (thirds.window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), init=int,
                                          fold=lambda m, n: n + 1,
                                          event_time=lambda kv: kv.value["ts"]), name="w")
     .map(lambda p: KV(p.key.key, p.message), name="fmt").send_to(out))
    assert seen is not None
    return app


def _events(n: int) -> list[KV[str, Any]]:
    # in event-time order, but for the last one, which is far behind: late
    out = [KV(f"e{i}", {"i": i, "ts": i * 0.1}) for i in range(n)]
    out.append(KV("late", {"i": 0, "ts": 0.0}))
    return out


def _by(samples: list[tuple[str, str, dict[str, str], Any]], group: str, name: str,
        label: str) -> dict[str, Any]:
    out: dict[str, Any] = defaultdict(int)
    for g, n, labels, v in samples:
        if g == group and n == name:
            out[labels.get(label, "")] += v
    return dict(out)


def test_operator_task_container_store_and_producer_metrics_count_what_happened(
        tmp_path: Path) -> None:
    runner = LocalRunner(_app(), {"job.dir": str(tmp_path / "job")},
                         inputs={"events": {0: _events(1500), 1: []}}).run()
    samples = runner.metrics.samples()
    op = "metered-1-"
    ins = _by(samples, "operator", "messages-in", "operator")
    outs = _by(samples, "operator", "messages-out", "operator")
    # 1,501 in; a third (0, 3, ..., 1497: 500, and the late one with i=0) pass the filter
    assert ins[op + "filter-third"] == 1501 and outs[op + "filter-third"] == 501
    assert ins[op + "map-rekey"] == outs[op + "map-rekey"] == 501
    assert ins[op + "map-count"] == 501
    assert ins[op + "window-w"] == 501
    panes = _by(samples, "operator", "panes-emitted", "operator")[op + "window-w"]
    assert panes == len(runner.messages("out")) and panes > 0
    assert ins[op + "map-fmt"] == panes
    assert _by(samples, "operator", "late-messages-dropped", "operator")[op + "window-w"] == \
        runner.late(op + "window-w")
    handle = _by(samples, "operator", "handle-ns", "operator")
    assert all(handle[o] > 0 for o in (op + "filter-third", op + "map-rekey", op + "window-w"))
    # tasks and the container: every record read is a processed envelope
    processed = _by(samples, "task", "messages-actually-processed", "task")
    container = {n: v for g, n, _, v in samples if g == "container"}
    assert container["process-envelopes"] == sum(processed.values()) >= 1501 + 501
    assert container["commit-calls"] >= 2 and container["commit-ns"] > 0
    assert 0.0 <= container["event-loop-utilization"] <= 1.0
    assert set(_by(samples, "task", "messages-in-flight", "task").values()) == {0}
    lag = {(labels["stream"], labels["partition"]): v for g, n, labels, v in samples
           if (g, n) == ("task", "lag")}
    assert lag[("events", "0")] == 0 and set(lag.values()) == {0}
    checkpointed = {(labels["stream"], labels["partition"]): v for g, n, labels, v in samples
                    if (g, n) == ("task", "checkpointed-offset")}
    assert checkpointed[("events", "0")] == 1500
    # the table: five keys written, each flushed once; its bytes; nothing restored
    puts = _by(samples, "store", "puts", "store")
    assert puts["seen"] == 5
    assert _by(samples, "store", "bytes", "store")["seen"] > 0
    assert _by(samples, "store", "restore-entries", "store")["seen"] == 0
    # the producer: every output and intermediate record, and what it wrote
    producer = {n: v for g, n, _, v in samples if g == "producer"}
    assert producer["sends"] >= 501 + panes and producer["bytes"] > 0
    assert producer["flush-ns"] > 0
    # the user's own, through ctx.metrics
    user = {n: v for g, n, _, v in samples if g == "user"}
    assert user["odd-users"] == sum(1 for i in range(0, 1500, 3) if (i % 5) % 2) + 0
    assert user["count-time-count"] == 501 and user["count-time-ns"] > 0


def test_a_windows_late_drops_and_panes_are_its_metrics(tmp_path: Path) -> None:
    app = StreamApplication("late", config={"task.commit.ms": 100})
    local = LocalSystem("local")
    out = app.output(local.output("out", serde=SERDE, partitions=1))
    (app.input(local.input("events", serde=SERDE, partitions=1))
     .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=1), init=int,
                                    fold=lambda m, n: n + 1,
                                    event_time=lambda kv: kv.value["ts"]), name="w")
     .map(lambda p: KV(p.key.key, p.message), name="fmt").send_to(out))
    events = [KV("a", {"ts": t}) for t in (0.1, 0.5, 1.2, 2.5, 0.3, 3.1)]  # 0.3 is late
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")},
                         inputs={"events": events}).run()
    samples = runner.metrics.samples()
    assert _by(samples, "operator", "late-messages-dropped", "operator")["late-1-window-w"] == 1
    assert _by(samples, "operator", "panes-emitted", "operator")["late-1-window-w"] == 4
    assert _by(samples, "operator", "messages-out", "operator")["late-1-window-w"] == 4
    assert _by(samples, "operator", "messages-in", "operator")["late-1-window-w"] == 6


def test_metrics_operators_off_leaves_the_operators_unmetered(tmp_path: Path) -> None:
    runner = LocalRunner(_app({"metrics.operators": False}), {"job.dir": str(tmp_path / "job")},
                         inputs={"events": {0: _events(30), 1: []}}).run()
    samples = runner.metrics.samples()
    assert not [s for s in samples if s[0] == "operator"]
    assert any(s[1] == "process-envelopes" for s in samples)


def test_lag_shows_while_a_following_job_is_behind(tmp_path: Path) -> None:
    app = StreamApplication("lagging", config={"task.commit.ms": 100})
    local = LocalSystem("local")
    out = app.output(local.output("out", serde=SERDE, partitions=1))

    def slow(kv: KV[str, Any]) -> KV[str, Any]:
        time.sleep(0.002)
        return kv

    app.input(local.input("events", serde=SERDE, partitions=1)).map(slow, name="slow") \
        .send_to(out)
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")},
                         inputs={"events": [KV(f"e{i}", {"i": i}) for i in range(2000)]},
                         follow=True)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        lags: list[int] = []
        while time.monotonic() < deadline:
            lags += [v for g, n, labels, v in runner.metrics.samples()
                     if (g, n) == ("task", "lag") and labels["stream"] == "events"]
            if lags and lags[-1] == 0 and max(lags) > 0:
                break
            time.sleep(0.05)
        assert max(lags) > 500  # behind at first: end offset 2,000, far ahead of the reader
        assert lags[-1] == 0  # and caught up
    finally:
        runner.stop(timeout=30)


def test_json_and_snapshot_reporters_write_the_runs_totals(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    config = {"job.dir": str(job_dir), "metrics.reporters": "snapshot, json",
              "metrics.reporter.interval.ms": 50}
    runner = LocalRunner(_app(), config, inputs={"events": {0: _events(600), 1: []}}).run()
    path = job_dir / "metrics-container.json"
    record = json.loads(path.read_text())
    assert record["header"]["job-name"] == "metered-1"
    assert record["header"]["container-name"] == "container"
    final: dict[tuple[str, str, str], Any] = defaultdict(int)  # summed over the tasks
    for m in record["metrics"]:
        if m["group"] in ("operator", "container"):
            final[(m["group"], m["name"], m["labels"].get("operator", ""))] += m["value"]
    assert final[("container", "process-envelopes", "")] == \
        runner.metrics.samples()[0][3]
    assert final[("operator", "messages-in", "metered-1-filter-third")] == 601
    # the snapshot stream in the job's local log: one record an interval, the last the totals
    job = LocalJob(_app(), {"job.dir": str(job_dir)}, run=False)
    try:
        log = LocalLog(job.log_of("local").path)
        try:
            _, records = log.read(metrics_stream("metered-1"), 0, 0, 10_000)
        finally:
            log.close()
    finally:
        job.close()
    assert records
    snaps = [json.loads(r[1]) for r in records]
    assert all(r[0] == b"container" for r in records)
    times = [s["header"]["time"] for s in snaps]
    assert times == sorted(times)
    last = {(m["group"], m["name"]): m["value"] for m in snaps[-1]["metrics"]
            if not m["labels"]}
    assert last[("container", "process-envelopes")] == \
        final[("container", "process-envelopes", "")]


def test_prometheus_endpoint_serves_the_metrics_with_their_labels(tmp_path: Path) -> None:
    app = _app({"metrics.reporters": "prometheus", "metrics.reporter.prometheus.port": 0})
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")},
                         inputs={"events": {0: _events(900), 1: []}}, follow=True)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
                runner.container is None or runner.container.reporters is None
                or runner.container.reporters.address is None):
            time.sleep(0.02)
        host, port = runner.container.reporters.address
        assert host == "127.0.0.1"
        families: dict[str, Any] = {}
        ins: dict[str, float] = {}
        while time.monotonic() < deadline:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) \
                .read().decode()
            families = {f.name: f for f in text_string_to_metric_families(text)}
            ins = defaultdict(float)  # summed over the tasks
            # the endpoint serves from the container's start, before its tasks are built
            fam = families.get("samza_operator_messages_in")
            for s in fam.samples if fam is not None else []:
                ins[s.labels["operator"]] += s.value
            lag_fam = families.get("samza_task_lag")
            caught_up = lag_fam is not None and any(
                s.labels["stream"] == "events" and s.labels["partition"] == "0" and s.value == 0
                for s in lag_fam.samples)
            # the scrape runs in a thread of its own: it may come between the operator's count
            # and the task's offset moving
            if ins.get("metered-1-filter-third") == 901 and caught_up:
                break
            time.sleep(0.1)
        assert ins["metered-1-filter-third"] == 901
        sample = next(s for s in families["samza_operator_messages_in"].samples
                      if s.labels["operator"] == "metered-1-filter-third")
        assert sample.name == "samza_operator_messages_in_total"
        assert sample.labels["job"] == "metered-1" and sample.labels["container"] == "container"
        assert sample.labels["task"] == "Partition 0"
        assert families["samza_task_lag"].type == "gauge"
        lag = {(s.labels["stream"], s.labels["partition"]): s.value
               for s in families["samza_task_lag"].samples}
        assert lag[("events", "0")] == 0
        assert families["samza_user_odd_users"].type == "counter"
    finally:
        runner.stop(timeout=30)


def test_an_unknown_reporter_is_a_config_error_naming_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"metrics.reporters='jmx': no reporter 'jmx'; "
                                          r"choose among prometheus, snapshot, json"):
        LocalRunner(_app({"metrics.reporters": "jmx"}), {"job.dir": str(tmp_path / "job")},
                    inputs={"events": {0: _events(3), 1: []}}).run()
