"""W3's memory (``W3M``): the peak RSS of a job holding 10^6 distinct keys in its window state,
next to the size of the data that state holds.

    python benchmarks/run.py W3M                     # 10^6 keys, 3 runs
    python benchmarks/run.py W3M --runs 1 --scale 0.1
    python benchmarks/memory_workloads.py --tracemalloc   # once, with where the memory goes

The job is W3's on the embedded local system (as ``W3L``): page views ``{"user", "country",
"ts"}``, ``partition_by`` into 4 partitions, a keyed tumbling event-time window of 10 s counting
views, here keyed by user, with every user distinct and every view inside one 10 s window, so that
all 10^6 panes are open at once, at the end of the input. The views are loaded into the local log
by this process; the job runs in a fresh process, which reports its own memory from
``/proc/self/status``: ``VmRSS`` once the job is set up and before it runs, the peak ``VmHWM``, and
a sampler thread's peaks of ``RssAnon`` (the heap) and ``RssFile`` (mapped files: the LMDB log
and stores). The data held in state is what the window store holds at that point: the bytes of
the 10^6 keys ``(pane start, user)`` and counts, as the store encodes them
(``runtime.state.codec.state_codec``). The line's ``peak_rss_mb`` is the job process's peak,
``ratio`` that peak over the state's size, and ``growth_ratio`` the peak less the set-up process's
RSS over it (the target: at most 2).

With ``--tracemalloc`` the job's process also traces Python's allocations and prints the
largest lines of code by memory held at the traced peak (the run is then several times slower).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import emit  # noqa: E402
from runtime.local.system import LocalJob  # noqa: E402
from runtime.runner import LocalRunner  # noqa: E402
from runtime.state.codec import state_codec  # noqa: E402
from samza_dsl import StreamApplication, Windows  # noqa: E402
from samza_dsl.serdes import JsonSerde  # noqa: E402
from samza_dsl.systems import LocalSystem  # noqa: E402

__all__ = ["run_w3_memory", "w3m_app", "w3m_input", "state_bytes"]

PARTITIONS = 4
WINDOW_S = 10
T0 = 1_700_000_000.0
TOP = 15


def w3m_app() -> StreamApplication:
    app = StreamApplication("w3m-window-memory")
    local = LocalSystem("local")
    inp = app.input(local.input("page-views", serde=JsonSerde(), partitions=PARTITIONS,
                                event_time=lambda v: v["ts"]))
    out = app.output(local.output("views-per-user", serde=JsonSerde(), partitions=1))
    (inp.partition_by(lambda v: v["user"], name="by-user")
        .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=WINDOW_S),
                                       init=lambda: 0, fold=lambda kv, n: n + 1,
                                       event_time=lambda kv: kv.value["ts"]), name="count")
        .map(lambda pane: (pane.key.key, pane.key.pane_id, pane.message), name="flat")
        .send_to(out))
    return app


def w3m_input(keys: int) -> dict[int, list[dict[str, Any]]]:
    """One view per user, ``keys`` users, all within the first 10 s window (ordered by time)."""
    step = (WINDOW_S - 1) / keys
    parts: dict[int, list[dict[str, Any]]] = {p: [] for p in range(PARTITIONS)}
    for i in range(keys):
        parts[i % PARTITIONS].append({"user": f"u{i:07d}", "country": f"c{i % 40:02d}",
                                      "ts": round(T0 + i * step, 3)})
    return parts


def state_bytes(keys: int) -> int:
    """The bytes of the window state's entries when every pane is open: key ``(start, user)``
    and count, as the window store encodes them."""
    key_encode, _, value_encode, _ = state_codec({}, "window state of operator 'count'")
    start = int(T0 * 1000) - int(T0 * 1000) % (WINDOW_S * 1000)
    return sum(len(key_encode((start, f"u{i:07d}"))) + len(value_encode(1)) for i in range(keys))


# -- the job's process ---------------------------------------------------------------------------

def _status() -> dict[str, int]:
    """/proc/self/status's memory lines in kB."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                out[name] = int(rest.split()[0])
    return out


class _Sampler(threading.Thread):
    """Peaks of RssAnon and RssFile every ``interval`` s; with tracemalloc, a snapshot whenever
    the traced memory grew by a tenth since the last one (the last is at the traced peak)."""

    def __init__(self, interval: float = 0.02, trace: bool = False) -> None:
        super().__init__(daemon=True)
        self.interval, self.trace = interval, trace
        self.peak: dict[str, int] = {}
        self.snapshot: Any = None
        self._snap_at = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        import tracemalloc
        while not self._stop_event.wait(self.interval):
            for k, v in _status().items():
                self.peak[k] = max(self.peak.get(k, 0), v)
            if self.trace:
                current, _ = tracemalloc.get_traced_memory()
                if current > self._snap_at * 1.1:
                    self.snapshot = tracemalloc.take_snapshot()
                    self._snap_at = current

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def job_process(job_dir: str, keys: int, trace: bool) -> dict[str, Any]:
    """Runs the loaded job in this (fresh) process; its memory figures and the panes' check."""
    import tracemalloc
    app = w3m_app()
    runner = LocalRunner(app, {"job.dir": job_dir})
    before = _status()
    if trace:
        tracemalloc.start(1)
    sampler = _Sampler(trace=trace)
    sampler.start()
    t0 = time.perf_counter()
    runner.run()
    secs = time.perf_counter() - t0
    sampler.stop()
    end = _status()
    top: list[str] = []
    if trace and sampler.snapshot is not None:
        stats = sampler.snapshot.statistics("lineno")
        total = sum(s.size for s in stats)
        top = [f"{s.size / 2**20:.1f} MiB ({s.count} blocks) {s.traceback[0].filename}:"
               f"{s.traceback[0].lineno}" for s in stats[:TOP]]
        top.insert(0, f"traced at the snapshot: {total / 2**20:.1f} MiB")
        tracemalloc.stop()
    try:
        panes = runner.messages("views-per-user")
    finally:
        runner.close()
    counted = sum(c for _, _, c in panes)
    if len(panes) != keys or counted != keys:
        raise AssertionError(f"W3M: {len(panes)} panes counting {counted} views, for {keys} "
                             "users of one view each")
    return {"seconds": secs, "rss_before_kb": before["VmRSS"], "vm_hwm_kb": end["VmHWM"],
            "rss_anon_peak_kb": sampler.peak.get("RssAnon", 0),
            "rss_file_peak_kb": sampler.peak.get("RssFile", 0), "panes": len(panes),
            "tracemalloc_top": top}


# -- the benchmark ---------------------------------------------------------------------------------

def _compile_project() -> None:
    """Byte-compiles the project's modules (as installing a package does), so that the job's
    process starts from cached bytecode, as a deployed job does: modules compiled at import
    leave freed memory behind in the set-up process, which the run then reuses, and its growth
    would depend on whether a cache was there (3 to 4 MB here)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", "samza_dsl", "planner",
                    "operators", "runtime", "benchmarks"], cwd=root, env=env, check=True,
                   stdout=subprocess.DEVNULL)


def run_w3_memory(keys: int, trace: bool = False) -> dict[str, Any]:
    d = tempfile.mkdtemp(prefix="w3m-")
    try:
        job = LocalJob(w3m_app(), {"job.dir": d}, run=False)
        try:
            job._append("page-views", w3m_input(keys))
        finally:
            job.close()
        os.sync()  # the input's pages reach the disk before the job starts
        _compile_project()
        argv = [sys.executable, os.path.abspath(__file__), "--job-process", d, "--keys",
                str(keys)] + (["--tracemalloc"] if trace else [])
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"W3M: the job's process failed:\n{proc.stderr[-3000:]}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    data = state_bytes(keys)
    peak = got["vm_hwm_kb"] * 1024
    before = got["rss_before_kb"] * 1024
    mb = 2 ** 20
    line = emit("W3M", {"keys": keys, "views": keys, "partitions": PARTITIONS,
                        "system": "local"}, keys, got["seconds"],
                "state-data-bytes", 0.0,
                peak_rss_mb=round(peak / mb, 1), rss_before_run_mb=round(before / mb, 1),
                rss_anon_peak_mb=round(got["rss_anon_peak_kb"] * 1024 / mb, 1),
                rss_file_peak_mb=round(got["rss_file_peak_kb"] * 1024 / mb, 1),
                state_data_mb=round(data / mb, 1),
                ratio=round(peak / data, 2),
                growth_ratio=round((peak - before) / data, 2),
                target_max_ratio=2.0, within_target=(peak - before) / data <= 2.0,
                panes=got["panes"])
    for row in got["tracemalloc_top"]:
        print(f"  {row}", flush=True)
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--job-process", metavar="JOB_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job_process:
        print(json.dumps(job_process(args.job_process, args.keys, args.tracemalloc)), flush=True)
    else:
        run_w3_memory(args.keys, args.tracemalloc)


if __name__ == "__main__":
    main()
