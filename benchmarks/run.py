"""Runs the benchmarks: one JSON line per run, then a median line per workload.

    python benchmarks/run.py                 # W1-W4 at full size, 3 runs each
    python benchmarks/run.py W2 --runs 5
    python benchmarks/run.py --scale 0.1     # a quick look
    python benchmarks/run.py W1L W6          # on the embedded local system (named only)
    python benchmarks/run.py W1J --runs 5    # W1L with JSON serdes everywhere (named only)
    python benchmarks/run.py W3L W4L         # W3, W4 on the local log and LMDB (named only)
    python benchmarks/run.py W4E             # W4 in event time, within=10 min (named only)
    python benchmarks/run.py W7              # through a Kafka broker on 127.0.0.1 (named only)
    python benchmarks/run.py W6A             # W6 on a job aged by 10^6 updates of 10^4 keys, twice
    python benchmarks/run.py W8              # 1 and 2 container processes (named only)
    python benchmarks/run.py W8K             # W7's job in 1 and 2 consumer group members (named only)
    python benchmarks/run.py W3M             # peak RSS, 10^6 keys in window state (named only)
    python benchmarks/run.py W5              # Spark reprocessing, local[2] (named only)
    python benchmarks/run.py W5d             # W5 declared (Spark SQL tier) vs DataFrame (named only)
    python benchmarks/run.py W10             # a remote-table join over HTTP (named only)
    python benchmarks/run.py W5M             # its Python workers' peak RSS at 1x, 2x, 4x (named only)
    python benchmarks/run.py W1L --guarantee exactly-once   # W1L under a processing guarantee
    python benchmarks/run.py W1LX --runs 5   # W1L exactly once against at least once (named only)
    python benchmarks/run.py W7X             # W7 exactly once against at least once (named only)

W1L is W1 on the embedded local system (LMDB table with changelog); W6 restarts a W1 job holding
10^5 and 10^6 keys (host affinity, then changelog replay). W1J is W1L written the way users
write it: one ``KVSerde(JsonSerde(), JsonSerde())`` for the input, the table and the output
(same baseline: the plain loop, which encodes its output too). Each run of W1L, W1J and W4 gets
a fresh process, as a job would. W1L and W1J run only when named (W1L takes
about 7 s a run, W6 about 15 s a run and a few hundred MB of temporary disk). W7 is W1 through a
Kafka broker started on 127.0.0.1 for each run (Apache Kafka and tansu by default, alternating
run by run: ``--broker``), against
aiokafka's raw consume+produce loop over the same topics; it runs only when named (about 20 s a
run, most of it loading the input and checking both outputs). W5 reprocesses W3 on Spark
(local[2]) over 10^7 views in Parquet, against the same job hand-written with PySpark's RDD and
DataFrame APIs, all in one SparkSession; it runs only when named (about 100 s a run at full
size on 2 cores, after generating the input and a warm-up). W5M runs W5's compiled job over 2,
4 and 8 million views (1x, 2x, 4x; --scale scales them), each in a new SparkSession, and prints
one line with the Python workers' peak RSS at each size (named only). W10 joins against a remote
table served over HTTP by a process on 127.0.0.1 with 5 ms latency, at concurrency 100, without
and with cache hits (``benchmarks/remote_workloads.py``); it runs only when named (about 10 s a
run). W1LX (the local half of W7X) runs W1L with ``job.processing.guarantee=exactly-once`` and
with ``at-least-once`` in alternating fresh processes, ``--runs`` pairs (the order flips every
pair), and prints each pair's ratio (exactly once over at least once, msgs/s) and their median.
W7X runs W7's job with ``exactly-once`` and with ``at-least-once`` on one broker and one input in
the same run (the order flips every run): its rate is exactly once's, its baseline at least
once's, so its ratio is exactly once over at least once (target >= 0.8).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.brokers import BROKERS, kinds  # noqa: E402
from benchmarks.common import median_summary  # noqa: E402
from benchmarks.kafka_workloads import run_w7, run_w7x  # noqa: E402
from benchmarks.local_state_workloads import run_w3_local, run_w4_local  # noqa: E402
from benchmarks.local_workloads import run_w1_local, run_w6, run_w8, w6_growth  # noqa: E402
from benchmarks.workloads import run_w1, run_w2, run_w3, run_w4, run_w4e  # noqa: E402
from samza_dsl.config import AT_LEAST_ONCE, EXACTLY_ONCE, GUARANTEES  # noqa: E402

#: workloads whose every run gets a fresh process unless --in-process
_FRESH = ("W1L", "W1J", "W3", "W4", "W4E")


def _fresh_process(workload: str, scale: float, guarantee: str | None = None
                   ) -> dict[str, Any]:
    """One run in a new interpreter; its JSON line is echoed and returned."""
    more = ["--guarantee", guarantee] if guarantee else []
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), workload, "--runs", "1",
                           "--scale", str(scale), "--in-process", *more],
                          capture_output=True, text=True, check=True)
    line = json.loads(proc.stdout.splitlines()[0])
    print(json.dumps(line), flush=True)
    return line  # type: ignore[no-any-return]


def guarantee_pairs(pairs: int, scale: float) -> dict[str, Any]:
    """W1L exactly once against at least once, ``pairs`` pairs of fresh processes in the same
    run, alternating which goes first; one JSON line with each pair's ratio and the median."""
    ratios, eos, alo = [], [], []
    for i in range(pairs):
        order = (AT_LEAST_ONCE, EXACTLY_ONCE) if i % 2 == 0 else (EXACTLY_ONCE, AT_LEAST_ONCE)
        got = {g: _fresh_process("W1L", scale, g)["msgs_per_s"] for g in order}
        eos.append(got[EXACTLY_ONCE])
        alo.append(got[AT_LEAST_ONCE])
        ratios.append(round(got[EXACTLY_ONCE] / got[AT_LEAST_ONCE], 3))
    out = {"workload": "W1LX", "params": {"of": "W1L", "scale": scale, "pairs": pairs,
                                          "system": "local"},
           "exactly_once_msgs_per_s": [round(x, 1) for x in eos],
           "at_least_once_msgs_per_s": [round(x, 1) for x in alo],
           "ratios": ratios, "median_ratio": round(statistics.median(ratios), 3),
           "summary": True}
    print(json.dumps(out), flush=True)
    return out


def per_broker(runs: int, choice: str, one: Callable[[int, str], dict[str, Any]]) -> None:
    """``runs`` runs of a Kafka workload on each broker ``choice`` names, alternating broker by
    broker within each round; one median summary per broker."""
    lines: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds(choice)}
    for i in range(runs):
        for kind in lines:
            lines[kind].append(one(i, kind))
    for got in lines.values():
        median_summary(got)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("workloads", nargs="*", default=["W1", "W2", "W3", "W4"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the message counts")
    parser.add_argument("--in-process", action="store_true",
                        help="W1L, W1J, W3, W4: every run in this process (by default each run gets a fresh "
                             "process, as a job would: runs in one process slow down one after "
                             "another, from the memory the checks between them leave behind)")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="W1L, W1J: a setting for the job, e.g. metrics.reporters=prometheus "
                             "(repeatable; values are JSON where they parse, else strings)")
    parser.add_argument("--broker", choices=(*BROKERS, "both"), default="both",
                        help="W7, W7X, W8K: the broker each run starts (both: Apache Kafka and "
                             "tansu, alternating run by run, a summary for each)")
    parser.add_argument("--guarantee", choices=GUARANTEES, default=None,
                        help="W1L, W1J: job.processing.guarantee of the job (default: the "
                             "job's, at-least-once)")
    args = parser.parse_args()
    if args.guarantee:
        args.config.append(f"job.processing.guarantee={args.guarantee}")
    if args.config:
        from benchmarks.local_workloads import EXTRA_CONFIG

        extra: dict[str, Any] = {}
        for item in args.config:
            key, _, value = item.partition("=")
            try:
                extra[key] = json.loads(value)
            except ValueError:
                extra[key] = value
        os.environ[EXTRA_CONFIG] = json.dumps(extra)  # fresh processes inherit it

    def n(full: int) -> int:
        return max(1, int(full * args.scale))

    for w in args.workloads:
        w = w.upper()
        if w == "W1LX":
            guarantee_pairs(args.runs, args.scale)
        elif w in _FRESH and not args.in_process:
            median_summary([_fresh_process(w, args.scale) for _ in range(args.runs)])
        elif w == "W1":
            median_summary([run_w1(n(1_000_000)) for _ in range(args.runs)])
        elif w == "W2":
            for c in (1, 10, 100, 1000):
                # c=1 at 20,000 messages would take 100 s a run: keep each run near 5 s
                count = n(min(20_000, max(1_000, c * 1_000)))
                median_summary([run_w2(count, c) for _ in range(args.runs)])
        elif w == "W3":
            median_summary([run_w3(n(1_000_000)) for _ in range(args.runs)])
        elif w == "W4":
            median_summary([run_w4(n(500_000)) for _ in range(args.runs)])
        elif w == "W4E":
            median_summary([run_w4e(n(500_000)) for _ in range(args.runs)])
        elif w in ("W1L", "W1J"):
            median_summary([run_w1_local(n(1_000_000), w) for _ in range(args.runs)])
        elif w == "W3L":
            median_summary([run_w3_local(n(1_000_000)) for _ in range(args.runs)])
        elif w == "W4L":
            median_summary([run_w4_local(n(500_000)) for _ in range(args.runs)])
        elif w == "W3M":
            from benchmarks.memory_workloads import run_w3_memory

            median_summary([run_w3_memory(n(1_000_000)) for _ in range(args.runs)])
        elif w == "W8":
            median_summary([run_w8(n(1_000_000)) for _ in range(args.runs)])
        elif w == "W6":
            small_keys, large_keys = n(100_000), n(1_000_000)
            runs = []
            for _ in range(args.runs):
                small = run_w6(small_keys)
                base = {mode: ln["seconds_to_first_message"] for mode, ln in small.items()}
                large = run_w6(large_keys, baseline=base, baseline_keys=small_keys)
                w6_growth(small, large, small_keys, large_keys)
                runs.append((small, large))
            for i in range(2):
                for mode in runs[0][0]:
                    median_summary([r[i][mode] for r in runs])
        elif w == "W6A":
            from benchmarks.w6_aged import run_w6_aged

            runs_a = [run_w6_aged(n(10_000), n(1_000_000)) for _ in range(args.runs)]
            for name in runs_a[0]:
                median_summary([r[name] for r in runs_a])
        elif w == "W7":
            per_broker(args.runs, args.broker, lambda i, kind: run_w7(n(1_000_000), kind))
        elif w == "W8K":
            from benchmarks.w8k_group import run_w8k

            per_broker(args.runs, args.broker, lambda i, kind: run_w8k(n(1_000_000), kind))
        elif w == "W7X":
            per_broker(args.runs, args.broker,
                       lambda i, kind: run_w7x(n(1_000_000), i % 2 == 1, kind))
        elif w == "W10":
            from benchmarks.remote_workloads import run_w10

            runs_r = [run_w10(n(20_000)) for _ in range(args.runs)]
            for i in range(len(runs_r[0])):
                median_summary([r[i] for r in runs_r])
        elif w == "W5":
            from benchmarks.spark_workloads import run_w5, w5_summary  # pyspark: the spark extra
            w5_summary(run_w5(n(10_000_000), args.runs))
        elif w == "W5D":
            from benchmarks.spark_workloads import run_w5d, w5_summary

            w5_summary(run_w5d(n(10_000_000), args.runs))
        elif w == "W5M":
            from benchmarks.spark_workloads import run_w5_memory

            run_w5_memory(n(2_000_000))
        else:
            parser.error(f"unknown workload {w!r}")


if __name__ == "__main__":
    main()
