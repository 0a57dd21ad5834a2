"""W1 and W2 on samza-dsl, Bytewax and Quix Streams side by side, in one session; W7 (W1
through Kafka) on samza-dsl, aiokafka's raw loop and Kafka Streams on one broker.

    .venv/bin/python benchmarks/peers/install.py             # once: the peers' own venvs
    .venv/bin/python benchmarks/peers/compare.py             # W1 and W2, 5 rounds
    .venv/bin/python benchmarks/peers/compare.py W1 --runs 3 --scale 0.2
    .venv/bin/python benchmarks/peers/compare.py W7 --runs 3 --broker both --guarantee both

W7 is ``benchmarks/peers/compare_kafka.py``'s run (see there): ``--broker`` apache-kafka (the
default), tansu or both; ``--guarantee`` at-least-once (the default), exactly-once or both.

Each round runs every (system, workload) once, each in a fresh process of its own venv's Python
(the same interpreter for all), the systems in a different order each round so that a drift of
the machine's speed falls on each in turn. Every run measures its baseline in the same process
just before: for W1 the plain loop (msgspec decode, dict counter, msgspec encode; the best of 3),
for W2 a bare asyncio semaphore + gather; every run checks its outputs (W1: each id's counts
1, 2, 3... ending at its number of messages; W2: each input once). A JSON line per run, then one
per (system, workload) with the medians over the rounds ("summary": true).

The systems: samza-dsl (``benchmarks/workloads.py``'s W1 and W2 apps, in memory, via
``benchmarks/peers/run_samza.py``), Bytewax in memory (``benchmarks/peers/run_bytewax.py``) and
Quix Streams with RocksDB state (``benchmarks/peers/run_quixstreams.py``; see there what of
Quix is driven and what is left out).

W2 runs c in {1, 10, 100, 1000} with run.py's message counts (c=1: 1,000; c=10: 10,000; else
20,000); Quix Streams, which handles one message at a time, gets 1,000 messages at every c.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from benchmarks.peers import compare_kafka  # noqa: E402
from benchmarks.peers.install import PEERS, python_of  # noqa: E402

SYSTEMS = ("samza-dsl", *PEERS)
MODULES = {"samza-dsl": "benchmarks.peers.run_samza", "bytewax": "benchmarks.peers.run_bytewax",
           "quixstreams": "benchmarks.peers.run_quixstreams"}
W2_CONCURRENCY = (1, 10, 100, 1000)


def _python(system: str) -> str:
    if system == "samza-dsl":
        return sys.executable
    python = python_of(system)
    if not os.path.exists(python):
        raise SystemExit(f"{system} is not installed: run "
                         f"{os.path.relpath(sys.executable)} benchmarks/peers/install.py {system}")
    return python


def _one(system: str, args: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([_python(system), "-m", MODULES[system], *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{system} {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    line: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(line), flush=True)
    return line


def _summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    first = lines[0]
    out = {"system": first["system"], "version": first["version"], "workload": first["workload"],
           "params": first["params"], "runs": len(lines),
           "median_msgs_per_s": round(statistics.median(ln["msgs_per_s"] for ln in lines), 1),
           "baseline": first["baseline"],
           "median_baseline_msgs_per_s":
               round(statistics.median(ln["baseline_msgs_per_s"] for ln in lines), 1),
           "median_ratio": round(statistics.median(ln["ratio"] for ln in lines), 3),
           "ratios": [ln["ratio"] for ln in lines], "summary": True}
    if "ratio_to_limit" in first:
        out["median_ratio_to_limit"] = round(
            statistics.median(ln["ratio_to_limit"] for ln in lines), 3)
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("workloads", nargs="*", default=["W1", "W2"])
    parser.add_argument("--runs", type=int, default=5, help="rounds (each system once a round)")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the message counts")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS,
                        help="W1, W2 (W7 runs samza-dsl, aiokafka and Kafka Streams)")
    compare_kafka.add_arguments(parser)
    args = parser.parse_args()

    def n(full: int) -> int:
        return max(1, int(full * args.scale))

    jobs: list[tuple[str, list[str]]] = []  # (system, argv) of one round
    kafka = False
    for w in (w.upper() for w in args.workloads):
        if w == "W7":
            kafka = True
        elif w == "W1":
            jobs += [(s, ["W1", str(n(1_000_000))]) for s in args.systems]
        elif w == "W2":
            for c in W2_CONCURRENCY:
                count = n(min(20_000, max(1_000, c * 1_000)))
                jobs += [(s, ["W2", str(n(1_000) if s == "quixstreams" else count), str(c)])
                         for s in args.systems]
        else:
            parser.error(f"unknown workload {w!r}: W1, W2 or W7")
    for s in args.systems if jobs else ():
        _python(s)  # every system is installed before the first run

    results: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for r in range(args.runs):
        # rotate the order of the systems within each workload from round to round
        k = len(args.systems)
        for i in range(0, len(jobs), k):
            group = jobs[i:i + k]
            for system, argv in group[r % k:] + group[:r % k]:
                results.setdefault((system, *argv[:1], *argv[2:]), []).append(_one(system, argv))
    for lines in results.values():
        _summary(lines)
    if kafka:
        compare_kafka.run_rounds(args.runs, n(1_000_000),
                                 compare_kafka.pick(args.broker, compare_kafka.BROKERS),
                                 compare_kafka.pick(args.guarantee, compare_kafka.GUARANTEES),
                                 compare_kafka.SYSTEMS)


if __name__ == "__main__":
    main()
