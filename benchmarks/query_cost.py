"""What interactive queries cost a job: W1L (``benchmarks/local_workloads.py``) with
``query.enabled`` and a client asking it at a steady rate, against W1L without, runs interleaved
in pairs, each in a fresh process (the order flips every pair).

    python benchmarks/query_cost.py [--runs 5] [--scale 2] [--rate 100] [--neighbour]

The client is a process of its own (as a service that asks a job is): ``rate`` queries a second
through ``samza_dsl.query.QueryClient``, 8 in 10 a key's latest count, 1 in 10 its committed
count, 1 in 10 a prefix of 10 entries, keys drawn among W1's 10^4 ids. It starts, and has
imported what it needs, before the clock, and asks from the moment the endpoint records its
address. Prints one JSON line per run,
then the medians and the median of the pairs' costs in percent of W1L's messages per second,
and of the job process's CPU time (``time.process_time``, all its threads: the query endpoint's
too), which a shared machine's other work disturbs less than the wall clock.

The client's own work shares the machine with the job: on two cores (two hyperthreads of one
core, on many a cloud machine) a neighbour's work slows the job's thread whoever it talks to.
With ``--neighbour`` the runs without queries have the same client asking, at the same rate, a
stand-in endpoint in a process of its own (a ``ThreadServer`` answering each query at once), so
the pairs differ only in where the queries are answered: what remains is the endpoint's cost in
the job. A rate the job answers within its period (``--rate 40``: the endpoint serves one query
at a time, and a busy loop takes up to about 20 ms to read for one) keeps both clients steady.
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


def stand_in(job_dir: str) -> None:
    """An endpoint outside the job: answers every query at once with a fixed value, and records
    its address where the client looks for the job's; serves until SIGTERM."""
    from runtime.engine.query import query_file
    from runtime.host.http_thread import ThreadServer

    body = json.dumps({"found": True, "value": 1, "read": "latest"}).encode()
    server = ThreadServer(lambda method, target: (200, "application/json", body),
                          name="stand-in")
    host, port = server.start("127.0.0.1", 0)
    record = query_file(job_dir, 0)
    os.makedirs(os.path.dirname(record), exist_ok=True)
    with open(record + ".tmp", "w") as f:
        json.dump({"url": f"http://{host}:{port}/"}, f)
    os.replace(record + ".tmp", record)
    print("ready", flush=True)
    signal.sigwait({signal.SIGTERM})
    server.close()


def one_run(n: int, queries: bool, rate: float, ask: bool = True,
            neighbour: bool = False) -> dict[str, Any]:
    from benchmarks.local_workloads import _config, _events, _ids, _load
    from examples.readwrite_counter import app
    from runtime.runner import LocalRunner

    d = tempfile.mkdtemp(prefix="w1l-query-")
    asker = standin = None
    try:
        config = _config(d)
        assert _load(app, config, _events(_ids(n))) == n
        if queries:
            config = {**config, "query.enabled": True}
        if not queries and neighbour:  # the same client, asking a stand-in outside the job
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # for its sigwait
            standin = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--stand-in",
                                        d], stdout=subprocess.PIPE, text=True)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            assert standin.stdout is not None and standin.stdout.readline().strip() == "ready"
        if (queries and ask) or standin is not None:
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
        if standin is not None:
            standin.terminate()
            standin.wait(30)
            asked["stand_in"] = True
        if runner.container is not None and runner.container.query is not None:
            asked["loop_ms"] = round(runner.container.query.loop_s * 1000, 1)
        runner.stop()
        processed = runner.container.status()["processed"] if runner.container else 0
        runner.close()
        return {"queries": queries, "messages": n, "seconds": round(secs, 3),
                "msgs_per_s": round(n / secs), "cpu_s": round(cpu, 3), "processed": processed,
                **asked}
    finally:
        for proc in (asker, standin):
            if proc is not None and proc.poll() is None:
                proc.kill()
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--scale", type=float, default=2.0)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--neighbour", action="store_true",
                        help="runs without queries have the client ask a stand-in endpoint")
    parser.add_argument("--one", choices=["queries", "enabled", "none"], help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--stand-in", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client(args.client, args.rate)
        return
    if args.stand_in:
        stand_in(args.stand_in)
        return
    n = max(1, int(1_000_000 * args.scale))
    if args.one:
        print(json.dumps(one_run(n, args.one != "none", args.rate, ask=args.one == "queries",
                                 neighbour=args.neighbour)), flush=True)
        return
    lines: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for i in range(args.runs):
        for queries in ((False, True) if i % 2 == 0 else (True, False)):
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--one",
                                   "queries" if queries else "none", "--scale", str(args.scale),
                                   "--rate", str(args.rate),
                                   *(["--neighbour"] if args.neighbour else [])],
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
                      "without_queries": "a client asks a stand-in" if args.neighbour
                      else "no client",
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
