"""W3 and W4 on the embedded local system (``W3L``, ``W4L``): the intermediate stream of W3's
``partition_by`` is a stream of the local log, and the window state of W3 and the join state of
W4 are LMDB stores with changelogs, all with their default serde (``SafeSerde``). The in-memory
W3 and W4 never serialize; these measure what serializing costs.

    python benchmarks/run.py W3L W4L --runs 3

The input is loaded into the log before the clock starts; the timed part is
``LocalRunner(app, config).run()``. The baselines are W3's and W4's plain-Python loops.
"""

from __future__ import annotations

import shutil
import tempfile
from datetime import timedelta
from typing import Any

from benchmarks.common import emit, timed
from benchmarks.workloads import w3_baseline, w3_input, w4_baseline, w4_input
from runtime.local.system import LocalJob
from runtime.runner import LocalRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde
from samza_dsl.systems import LocalSystem

__all__ = ["run_w3_local", "run_w4_local"]


def w3_local_app() -> StreamApplication:
    app = StreamApplication("w3l-window")
    local = LocalSystem("local")
    inp = app.input(local.input("page-views", serde=JsonSerde(), partitions=4,
                                event_time=lambda v: v["ts"]))
    out = app.output(local.output("views-per-country", serde=JsonSerde(), partitions=1))
    (inp.partition_by(lambda v: v["country"], name="by-country")
        .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
                                       init=lambda: 0, fold=lambda kv, n: n + 1,
                                       event_time=lambda kv: kv.value["ts"]), name="count")
        .map(lambda pane: (pane.key.key, pane.key.pane_id, pane.message), name="flat")
        .send_to(out))
    return app


def w4_local_app() -> StreamApplication:
    app = StreamApplication("w4l-join")
    local = LocalSystem("local")
    serde = KVSerde(JsonSerde(), JsonSerde())
    imp = app.input(local.input("impressions", serde=serde, partitions=1))
    clk = app.input(local.input("clicks", serde=serde, partitions=1))
    out = app.output(local.output("joined", serde=serde, partitions=1))
    (imp.join(clk, key=lambda kv: kv.key, other_key=lambda kv: kv.key,
              combine=lambda a, b: KV(a.key, (a.value["ad"], b.value["kind"])),
              ttl=timedelta(minutes=10), name="imp-click")
        .send_to(out))
    return app


def _run(app: StreamApplication, load: Any, output: str) -> tuple[float, list[Any]]:
    d = tempfile.mkdtemp(prefix="samza-bench-")
    try:
        config = {"job.dir": d}
        job = LocalJob(app, config, run=False)
        try:
            load(job)
        finally:
            job.close()
        runner = LocalRunner(app, config)
        try:
            secs, _ = timed(runner.run)
            return secs, runner.messages(output)
        finally:
            runner.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run_w3_local(n: int) -> dict[str, Any]:
    parts = w3_input(n)
    base_s, expected = timed(lambda: w3_baseline(parts))
    secs, panes = _run(w3_local_app(), lambda job: job._append("page-views", parts),
                       "views-per-country")
    total = sum(c for _, _, c in panes)
    assert total >= n, f"W3L counted {total} of {n} views"
    return emit("W3", {"messages": n, "partitions": 4, "window_s": 10, "system": "local"}, n,
                secs, "plain-python-loop", n / base_s, panes=len(panes),
                expected_panes=len(expected))


def run_w4_local(n: int) -> dict[str, Any]:
    impressions, clicks = w4_input(n)
    base_s, expected = timed(lambda: w4_baseline(impressions, clicks))

    def load(job: LocalJob) -> None:
        job.load("impressions", impressions)
        job.load("clicks", clicks)
    secs, joined = _run(w4_local_app(), load, "joined")
    assert len(joined) == n, f"W4L joined {len(joined)} of {n}"
    return emit("W4", {"messages": 2 * n, "ttl_min": 10, "system": "local"}, 2 * n, secs,
                "plain-python-dict-join", 2 * n / base_s, joined=len(joined),
                baseline_joined=expected)
