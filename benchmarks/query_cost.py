"""What interactive queries cost a job: W1L (``benchmarks/local_workloads.py``) with
``query.enabled`` and a client asking it at a steady rate, against W1L without, runs interleaved
in pairs, each in a fresh process (the order flips every pair).

    python benchmarks/query_cost.py [--runs 5] [--scale 2] [--rate 100]

The client is a process of its own (as a service that asks a job is): ``rate`` queries a second
through ``samza_dsl.query.QueryClient``, 8 in 10 a key's latest count, 1 in 10 its committed
count, 1 in 10 a prefix of 10 entries, keys drawn among W1's 10^4 ids. It starts, and has
imported what it needs, before the clock, and asks from the moment the endpoint records its
address. Prints one JSON line per run,
then the medians and the median of the pairs' costs in percent of W1L's messages per second,
and of the job process's CPU time (``time.process_time``, all its threads: the query endpoint's
too), which a shared machine's other work disturbs less than the wall clock.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def client(job_dir: str, rate: float) -> None:
    """Asks the job at ``rate`` queries a second until SIGTERM; prints what it asked."""
    from samza_dsl.query import QueryClient, QueryError

    record = os.path.join(job_dir, "query", "container-0.json")
    counts = {"asked": 0, "answered": 0, "errors": 0}

    def done(*_: Any) -> None:
        print(json.dumps(counts), flush=True)
        os._exit(0)
    signal.signal(signal.SIGTERM, done)
    print("ready", flush=True)  # imported: the job's clock may start
    while not os.path.exists(record):
        time.sleep(0.002)
    time.sleep(0.01)  # the record is written whole by a rename, but read it once it settled
    with open(record) as f:
        qc = QueryClient([json.load(f)["url"]], timeout=5)
    rnd = random.Random(7)
    step = 1.0 / rate
    next_at = time.monotonic()
    while True:
        key = str(rnd.randint(1, 10_000))
        kind = rnd.random()
        counts["asked"] += 1
        try:
            if kind < 0.8:
                qc.get("counts", key)
            elif kind < 0.9:
                qc.get("counts", key, read="committed")
            else:
                qc.prefix("counts", key[:2], limit=10)
            counts["answered"] += 1
        except QueryError:  # e.g. committed before the first commit
            counts["errors"] += 1
        next_at += step
        time.sleep(max(0.0, next_at - time.monotonic()))


def one_run(n: int, queries: bool, rate: float, ask: bool = True) -> dict[str, Any]:
    from benchmarks.local_workloads import _config, _events, _ids, _load
    from examples.readwrite_counter import app
    from runtime.runner import LocalRunner

    d = tempfile.mkdtemp(prefix="w1l-query-")
    asker = None
    try:
        config = _config(d)
        assert _load(app, config, _events(_ids(n))) == n
        if queries:
            config = {**config, "query.enabled": True}
        if queries and ask:
            asker = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--client", d,
                                      "--rate", str(rate)], stdout=subprocess.PIPE, text=True)
            # its imports done before the clock starts: they would run beside the job's first
            # second on another core (a shared one, on a two-core machine) and be counted
            assert asker.stdout is not None and asker.stdout.readline().strip() == "ready"
        os.sync()
        runner = LocalRunner(app, config)
        t0, cpu0 = time.perf_counter(), time.process_time()
        runner.start()
        runner.wait()
        secs, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        asked: dict[str, Any] = {}
        if asker is not None:
            asker.send_signal(signal.SIGTERM)
            out, _ = asker.communicate(timeout=30)
            asked = json.loads(out.splitlines()[-1]) if out.strip() else {}
        if runner.container is not None and runner.container.query is not None:
            asked["loop_ms"] = round(runner.container.query.loop_s * 1000, 1)
        runner.stop()
        processed = runner.container.status()["processed"] if runner.container else 0
        runner.close()
        return {"queries": queries, "messages": n, "seconds": round(secs, 3),
                "msgs_per_s": round(n / secs), "cpu_s": round(cpu, 3), "processed": processed,
                **asked}
    finally:
        if asker is not None and asker.poll() is None:
            asker.kill()
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--scale", type=float, default=2.0)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--one", choices=["queries", "enabled", "none"], help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client(args.client, args.rate)
        return
    n = max(1, int(1_000_000 * args.scale))
    if args.one:
        print(json.dumps(one_run(n, args.one != "none", args.rate, ask=args.one == "queries")),
              flush=True)
        return
    lines: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for i in range(args.runs):
        for queries in ((False, True) if i % 2 == 0 else (True, False)):
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--one",
                                   "queries" if queries else "none", "--scale", str(args.scale),
                                   "--rate", str(args.rate)],
                                  capture_output=True, text=True, check=True)
            line = json.loads(proc.stdout.splitlines()[-1])
            print(json.dumps(line), flush=True)
            lines[queries].append(line)
    without = statistics.median(x["msgs_per_s"] for x in lines[False])
    with_q = statistics.median(x["msgs_per_s"] for x in lines[True])
    pairs = [100 * (a["msgs_per_s"] - b["msgs_per_s"]) / a["msgs_per_s"]
             for a, b in zip(lines[False], lines[True], strict=True)]
    cpu_pairs = [100 * (b["cpu_s"] - a["cpu_s"]) / a["cpu_s"]
                 for a, b in zip(lines[False], lines[True], strict=True)]
    print(json.dumps({"workload": "W1L", "runs": args.runs, "rate": args.rate,
                      "median_cpu_s_without_queries": statistics.median(
                          x["cpu_s"] for x in lines[False]),
                      "median_cpu_s_with_queries": statistics.median(
                          x["cpu_s"] for x in lines[True]),
                      "median_pair_cpu_cost_percent": round(statistics.median(cpu_pairs), 1),
                      "median_msgs_per_s_without_queries": round(without),
                      "median_msgs_per_s_with_queries": round(with_q),
                      "query_cost_percent": round(100 * (without - with_q) / without, 1),
                      "median_pair_cost_percent": round(statistics.median(pairs), 1),
                      "pair_costs_percent": [round(p, 1) for p in pairs]}))


if __name__ == "__main__":
    main()
