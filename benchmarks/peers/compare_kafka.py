"""W1 through Kafka (W7) on samza-dsl, aiokafka's raw loop and Kafka Streams, on one broker and
one input in the same run.

    .venv/bin/python benchmarks/peers/install.py kafka-streams     # once: Maven builds the peer
    .venv/bin/python benchmarks/peers/compare_kafka.py             # Apache Kafka, 3 rounds
    .venv/bin/python benchmarks/peers/compare_kafka.py --broker both --runs 5
    .venv/bin/python benchmarks/peers/compare_kafka.py --guarantee both   # and exactly once
    .venv/bin/python benchmarks/peers/compare.py W7 --runs 3       # the same, from compare.py

Each round starts a fresh broker on 127.0.0.1 (Apache Kafka 4.1.1 in KRaft mode, or tansu),
creates W7's input topic (4 partitions) and loads ``n`` W1 messages into it as
``benchmarks/kafka_workloads.py`` does, before any clock starts. Then every system runs once, each
in a fresh process of its own (Python or a JVM), in an order rotated from round to round, each
into an output topic of its own (4 partitions), over the same input:

- samza-dsl: W7's application (``kafka_workloads.w7_app``: the W1 counter, its table an LMDB
  store) by ``LocalRunner`` until its bounded input ends, with ``job.processing.guarantee``;
- aiokafka's raw consume+produce loop (``kafka_workloads._raw_loop``), the baseline;
- Kafka Streams (``run_kafka_streams``): the same per-record work (decode the JSON value, read
  the key's count from a RocksDB store with a changelog topic, add 1, write it back, emit the
  count as JSON) until it has handled ``n`` records, then ``close()``; at least once, or
  ``exactly_once_v2`` where samza-dsl runs exactly once.

Every system is timed the same way, inside its own process, after its imports (or the JVM's
start) and before its exit: from the job's start (``LocalRunner.run``, the clients' ``start``,
``KafkaStreams.start``) to the end of the job with every output record acknowledged by the
broker and the last commit made. The span holds each system's start-up against the broker
(topics, group join, stores, restores); ``first_record_seconds`` gives Kafka Streams' share of
it, its ``second_half_msgs_per_s`` the rate from its middle record to its last (the JIT warm by
then), and ``process_seconds`` the whole process's life for every system. ``cpu_seconds`` is the
system's process's CPU time over the timed span (every thread), ``broker_cpu_seconds`` the
broker's over the system's process. Every output is read back
afterwards and checked (``n`` records, each in its key's murmur2 partition, the last count of
every id its true count).

A JSON line per system and round, with the raw loop's rate of the same round as its baseline;
then, per system and guarantee, the medians over the rounds, and per guarantee the median of
the rounds' samza-dsl / Kafka Streams ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from importlib.metadata import version
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from benchmarks.common import emit  # noqa: E402
from benchmarks.kafka_workloads import (  # noqa: E402
    PARTITIONS,
    RAW_CONSUMER,
    RAW_PRODUCER,
    _changelog_topics,
    _check,
    _create_topics,
    _load,
    _raw_loop,
    _read_back,
    w7_app,
    w7_input,
)
from benchmarks.peers import run_kafka_streams  # noqa: E402
from examples.readwrite_counter import CountInTable  # noqa: E402
from samza_dsl.testing.apache_kafka import KAFKA_VERSION, ApacheKafkaBroker  # noqa: E402
from samza_dsl.testing.kafka_broker import TansuBroker  # noqa: E402

__all__ = ["BROKERS", "GUARANTEES", "one_round", "main"]

BROKERS = ("apache-kafka", "tansu")
GUARANTEES = ("at-least-once", "exactly-once")
RAW = "aiokafka-raw"
SYSTEMS = ("samza-dsl", "kafka-streams")


def _broker_name(kind: str) -> str:
    return f"Apache Kafka {KAFKA_VERSION}" if kind == "apache-kafka" else "tansu"


def _start(kind: str) -> ApacheKafkaBroker | TansuBroker:
    if kind == "apache-kafka":
        # the JVM's defaults (the tests' brokers start with the client compiler only)
        broker = ApacheKafkaBroker(jvm_options=[])
        broker.start()
        return broker
    return TansuBroker().start()


# -- one system's run, in a process of its own ------------------------------------------------------

def _peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM: getrusage's would count the parent's, from before
    the exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


#: the records W7's job has handled in this process, and when it handled its first, middle and
#: last one (every task's counter is a copy of the app's: these are shared)
_SEEN = [0]
_MARKS: dict[str, float] = {}


class _Marked(CountInTable):
    """W7's counter, noting when the job handled its first, middle and last record of ``n``,
    over every task of the process, as the Kafka Streams peer's processor does."""

    def __init__(self, n: int) -> None:
        self.marks = {1: "first", n // 2: "half", n: "last"}

    def __call__(self, kv: Any) -> Any:
        _SEEN[0] += 1
        mark = self.marks.get(_SEEN[0])
        if mark is not None:
            _MARKS[mark] = time.perf_counter()
        return super().__call__(kv)


def _samza(bootstrap: str, events: str, out: str, guarantee: str, n: int) -> dict[str, Any]:
    from runtime.runner import LocalRunner

    job_dir = tempfile.mkdtemp(prefix="w7-peers-")
    try:
        app = w7_app(f"w7-peers-{uuid.uuid4().hex[:8]}", bootstrap, events, out,
                     count=_Marked(n))
        runner = LocalRunner(app, {"job.dir": job_dir, "job.processing.guarantee": guarantee})
        t0, cpu0 = time.perf_counter(), time.process_time()
        runner.run()
        secs, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        commits = runner.container.commits if runner.container is not None else None
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)
    changelogs = asyncio.run(_changelog_topics(bootstrap, app.name))
    marks = _MARKS
    return {"seconds": secs, "version": version("samza-dsl"), "cpu_seconds": round(cpu, 3),
            "commits": commits,
            "first_record_seconds": round(marks["first"] - t0, 4) if "first" in marks else None,
            "second_half_msgs_per_s": round((n - n // 2) / (marks["last"] - marks["half"]), 1)
            if "half" in marks and "last" in marks else None,
            "store": "lmdb+changelog" if changelogs else "lmdb", "peak_rss_mb": _peak_rss_mb()}


def _raw(bootstrap: str, events: str, out: str, ends: list[int]) -> dict[str, Any]:
    cpu0 = time.process_time()
    secs = asyncio.run(_raw_loop(bootstrap, events, out, ends, RAW_CONSUMER, RAW_PRODUCER))
    return {"seconds": secs, "version": version("aiokafka"),
            "cpu_seconds": round(time.process_time() - cpu0, 3), "peak_rss_mb": _peak_rss_mb()}


def _one(system: str, bootstrap: str, events: str, out: str, n: int, guarantee: str,
         ends: list[int]) -> dict[str, Any]:
    """Runs ``system`` once in a fresh process; its seconds (and more) as it timed them."""
    if system == "kafka-streams":
        ks = run_kafka_streams.run(bootstrap, events, out, n, guarantee)
        return {"seconds": ks["seconds"], "version": ks["version"],
                "process_seconds": ks["process_seconds"],
                "first_record_seconds": ks["first_record_seconds"],
                "close_seconds": ks["close_seconds"], "cpu_seconds": ks["cpu_seconds"],
                "second_half_msgs_per_s": ks["second_half_msgs_per_s"],
                "threads_cpu_seconds": ks["threads_cpu_seconds"], "peak_rss_mb": ks["peak_rss_mb"]}
    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONWARNINGS": "ignore"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "benchmarks.peers.compare_kafka", "--one",
                           system, bootstrap, events, out, guarantee,
                           ",".join(map(str, ends))],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    process_s = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{system} W7 failed:\n{proc.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    got["process_seconds"] = round(process_s, 4)
    return got


# -- a round --------------------------------------------------------------------------------------

def _broker_cpu(broker: ApacheKafkaBroker | TansuBroker) -> float:
    """The broker process's CPU seconds so far (user and system)."""
    proc = broker.proc if isinstance(broker, TansuBroker) else broker.nodes[0].proc
    assert proc is not None
    with open(f"/proc/{proc.pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(n: int, kind: str, guarantees: tuple[str, ...], systems: tuple[str, ...],
              rotate: int) -> list[dict[str, Any]]:
    """A fresh broker of ``kind``, one input, every system once (the order rotated by
    ``rotate``); a line per system, each with the raw loop's rate of this round."""
    parts = w7_input(n)
    truth = Counter(key for records in parts for key, _ in records)
    ends = [len(records) for records in parts]
    tag = uuid.uuid4().hex[:8]
    events = f"w7-events-{tag}"
    jobs = [(RAW, "at-least-once")] + [(s, g) for g in guarantees for s in systems]
    jobs = jobs[rotate % len(jobs):] + jobs[:rotate % len(jobs)]
    outs = {job: f"w7-{job[0]}-{job[1]}-{tag}" for job in jobs}
    got: dict[tuple[str, str], dict[str, Any]] = {}
    broker = _start(kind)
    try:
        bootstrap = broker.bootstrap
        asyncio.run(_create_topics(bootstrap, [events, *outs.values()]))
        asyncio.run(_load(bootstrap, events, parts))
        parts.clear()
        for system, guarantee in jobs:
            cpu0 = _broker_cpu(broker)
            got[(system, guarantee)] = _one(system, bootstrap, events, outs[(system, guarantee)],
                                            n, guarantee, ends)
            # the broker's CPU over the system's whole process (its run is most of it)
            got[(system, guarantee)]["broker_cpu_seconds"] = round(_broker_cpu(broker) - cpu0, 2)
            _check(f"{system} {guarantee}",
                   asyncio.run(_read_back(bootstrap, outs[(system, guarantee)], n)), n, truth)
    finally:
        broker.stop()
    raw_rate = n / got[(RAW, "at-least-once")]["seconds"]
    lines = []
    for (system, guarantee), run in got.items():
        extra = {k: v for k, v in run.items() if k not in ("seconds", "version")}
        lines.append(emit("W7", {"messages": n, "partitions": PARTITIONS,
                                 "broker": _broker_name(kind), "guarantee": guarantee},
                          n, run["seconds"], "aiokafka-raw-loop", raw_rate, system=system,
                          version=run["version"], order=[f"{s} {g}" for s, g in jobs],
                          **extra))
    return lines


def _rates(got: list[dict[str, Any]]) -> dict[str, Any]:
    """A system's rate told four ways, medians over its rounds: the whole timed run (its start
    against the broker included: group join, stores); from its first record on (start
    excluded); warm, from its middle record to its last; and over its whole process (the
    interpreter's or the JVM's start and exit included)."""
    out: dict[str, Any] = {}
    n = got[0]["messages"]

    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v]
        return round(statistics.median(known), 1) if known else None
    if all(ln.get("first_record_seconds") is not None for ln in got):
        out["median_first_record_seconds"] = round(statistics.median(
            ln["first_record_seconds"] for ln in got), 3)
        out["median_msgs_per_s_from_first_record"] = median(
            [n / (ln["seconds"] - ln["first_record_seconds"]) for ln in got])
    out["median_second_half_msgs_per_s"] = median(
        [ln.get("second_half_msgs_per_s") for ln in got])
    out["median_msgs_per_s_whole_process"] = median(
        [n / ln["process_seconds"] for ln in got if ln.get("process_seconds")])
    return {k: v for k, v in out.items() if v is not None}


#: a round's rate of one system, told other ways than the whole timed run (``_rates``)
_WAYS = {
    "from_first_record": lambda ln: ln["messages"] / (ln["seconds"] - ln["first_record_seconds"])
    if ln.get("first_record_seconds") is not None else None,
    "warm": lambda ln: ln.get("second_half_msgs_per_s"),
    "whole_process": lambda ln: ln["messages"] / ln["process_seconds"]
    if ln.get("process_seconds") else None,
}


def _summaries(lines: list[dict[str, Any]]) -> None:
    by: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for ln in lines:
        by.setdefault((ln["params"]["broker"], ln["system"], ln["params"]["guarantee"]),
                      []).append(ln)
    for (broker, system, guarantee), got in by.items():
        print(json.dumps({
            "workload": "W7", "broker": broker, "system": system, "version": got[0]["version"],
            "guarantee": guarantee, "runs": len(got),
            "median_msgs_per_s": round(statistics.median(ln["msgs_per_s"] for ln in got), 1),
            "median_baseline_msgs_per_s":
                round(statistics.median(ln["baseline_msgs_per_s"] for ln in got), 1),
            "median_ratio_to_raw": round(statistics.median(ln["ratio"] for ln in got), 3),
            "ratios_to_raw": [ln["ratio"] for ln in got],
            **_rates(got),
            "median_cpu_seconds": round(statistics.median(ln["cpu_seconds"] for ln in got), 2),
            "summary": True}), flush=True)
    # samza-dsl against Kafka Streams, round by round (their lines come in pairs)
    for broker in dict.fromkeys(b for b, _, _ in by):
        for guarantee in dict.fromkeys(g for _, _, g in by):
            samza = by.get((broker, "samza-dsl", guarantee), [])
            ks = by.get((broker, "kafka-streams", guarantee), [])
            if not samza or len(samza) != len(ks):
                continue
            ratios = [round(a["msgs_per_s"] / b["msgs_per_s"], 3) for a, b in zip(samza, ks, strict=True)]
            told: dict[str, Any] = {}
            for way, rate in _WAYS.items():
                pairs = [(rate(a), rate(b)) for a, b in zip(samza, ks, strict=True)]
                if all(x and y for x, y in pairs):
                    told[f"median_samza_dsl_over_kafka_streams_{way}"] = round(
                        statistics.median(x / y for x, y in pairs), 3)
            print(json.dumps({
                "workload": "W7", "broker": broker, "guarantee": guarantee,
                "samza_dsl_over_kafka_streams": ratios,
                "median_samza_dsl_over_kafka_streams": round(statistics.median(ratios), 3),
                **told, "summary": True}), flush=True)


def run_rounds(runs: int, n: int, brokers: tuple[str, ...], guarantees: tuple[str, ...],
               systems: tuple[str, ...]) -> list[dict[str, Any]]:
    if "kafka-streams" in systems and not run_kafka_streams.installed():
        raise SystemExit("kafka-streams is not built: run "
                         f"{os.path.relpath(sys.executable)} benchmarks/peers/install.py "
                         f"kafka-streams")
    lines: list[dict[str, Any]] = []
    for r in range(runs):
        order = brokers if r % 2 == 0 else brokers[::-1]
        for kind in order:
            lines += one_round(n, kind, guarantees, systems, r)
    _summaries(lines)
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--broker", choices=(*BROKERS, "both"), default="apache-kafka",
                        help="the broker each round starts (both: each in every round)")
    parser.add_argument("--guarantee", choices=(*GUARANTEES, "both"), default="at-least-once",
                        help="samza-dsl's and Kafka Streams' processing guarantee")


def pick(choice: str, every: tuple[str, ...]) -> tuple[str, ...]:
    return every if choice == "both" else (choice,)


def main() -> None:
    if sys.argv[1:2] == ["--one"]:  # --one SYSTEM BOOTSTRAP EVENTS OUT GUARANTEE ENDS
        system, bootstrap, events, out, guarantee, ends = sys.argv[2:8]
        if system == "samza-dsl":
            line = _samza(bootstrap, events, out, guarantee,
                          sum(int(e) for e in ends.split(",")))
        else:
            line = _raw(bootstrap, events, out, [int(e) for e in ends.split(",")])
        print(json.dumps(line), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="rounds")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of 10^6 messages")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS,
                        help="beside the raw loop, which always runs")
    add_arguments(parser)
    args = parser.parse_args()
    run_rounds(args.runs, max(1, int(1_000_000 * args.scale)), pick(args.broker, BROKERS),
               pick(args.guarantee, GUARANTEES), tuple(args.systems))


if __name__ == "__main__":
    main()
