"""Benchmark W8K (see docs/benchmarks.md): W1 through Kafka in two members of the job's consumer
group (``job.coordinator=kafka``) against one.

Each run starts a fresh in-memory tansu broker on 127.0.0.1. For 1, then 2 members, on topics of
their own (input and output of 4 partitions, as W7's): the members are ``samza-dsl run APP
--follow`` processes of W7's job (the counter of examples/readwrite_counter.py, its table an LMDB
store with a changelog), each with a job.dir of its own, as on separate hosts. Once every member
logged its share of one generation (the 4 tasks, each once) and their stores are restored, the
members are stopped (SIGSTOP) while W7's loader appends the ``n`` W1 messages to the input
(within the session timeout, so they stay in the group); the clock starts as they go on
(SIGCONT) and stops when the output holds a count for every message (its true end offsets,
polled every 0.1 s). Neither loading nor group formation is timed (the rebalance pause is
``group_rebalance.py``'s).

The output is then read back and checked as W7's (``n`` records, each in its key's partition,
the last count of every id its true count), and the members are stopped (SIGTERM: drain,
commit, leave).

    python benchmarks/run.py W8K --runs 3

The line is workload "W8K", params messages, partitions, members 2, system "kafka (tansu)" and
cores; ``baseline_msgs_per_s`` is the 1-member rate of the same run (target ratio >= 1.6). It
also gives the CPU seconds the broker and the members used in each timed window
(``broker_cpu_s``, ``members_cpu_s``, keyed by the number of members) and the machine's 1-minute
load average at the end: on 2 cores the broker and the benchmark's own polling share the cores
with the members, and other processes on the machine show in the load average.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from benchmarks.brokers import Broker, pid_of, start_broker, system_of
from benchmarks.common import emit
from benchmarks.kafka_workloads import (
    PARTITIONS,
    _check,
    _create_topics,
    _load,
    _read_back,
    w7_app,
    w7_input,
)
from runtime.kafka.system import true_end_offsets
from samza_dsl import StreamApplication

__all__ = ["run_w8k"]

CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
#: long enough for the members to wait (stopped) while the input is loaded; tansu completes a
#: join in about half of it (not timed)
SESSION_S = 30
GROUP = ("-c", f"systems.kafka.consumer.session.timeout.ms={SESSION_S * 1000}",
         "-c", "systems.kafka.consumer.heartbeat.interval.ms=500")
_RUNS = re.compile(r"group generation (\d+): runs (.*?)(?: \(restoring (.*)\))?$")


def __getattr__(name: str) -> StreamApplication:
    """``app``: W7's job on the topics the run passes in the environment."""
    if name == "app":
        env = os.environ
        return w7_app(env["W8K_JOB"], env["W8K_BOOTSTRAP"], env["W8K_EVENTS"], env["W8K_COUNTS"])
    raise AttributeError(name)


def _share(log: Path) -> tuple[int, list[str], bool] | None:
    """A member's last logged share: (generation, tasks, all restored). Only the tasks the
    share names as restoring log a restore; those it kept from its last share do not."""
    found = None
    restored = restoring = 0
    for line in log.read_text(errors="replace").splitlines():
        m = _RUNS.search(line)
        if m:
            tasks = [] if m.group(2) == "no task" else m.group(2).split(", ")
            found, restored = (int(m.group(1)), tasks), 0
            restoring = len(m.group(3).split(", ")) if m.group(3) else 0
        elif "restored (" in line:
            restored += 1
    return None if found is None else (*found, restored >= restoring)


def _settled(logs: list[Path], procs: list[subprocess.Popen[bytes]]) -> bool:
    for p, log in zip(procs, logs, strict=True):
        if p.poll() is not None:
            raise RuntimeError(f"W8K: a member ended ({p.returncode}):\n"
                               f"{log.read_text(errors='replace')[-2000:]}")
    shares = [_share(log) for log in logs]
    if any(s is None or not s[2] for s in shares):
        return False
    tasks = [t for s in shares if s is not None for t in s[1]]
    return len({s[0] for s in shares if s is not None}) == 1 and \
        len(tasks) == len(set(tasks)) == PARTITIONS and all(s is not None and s[1] for s in shares)


async def _wait_output(bootstrap: str, topic: str, n: int, deadline: float) -> float:
    """When the output's partitions hold ``n`` records in all (``time.perf_counter()``)."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    while True:
        ends = await true_end_offsets(bootstrap, tps, {}, 30.0)
        now = time.perf_counter()
        if sum(ends.values()) >= n:
            return now
        if time.monotonic() > deadline:
            raise RuntimeError(f"W8K: the output holds {sum(ends.values())} of {n} records")
        await asyncio.sleep(0.1)


def _cpu(pid: int) -> float:
    """CPU seconds a process has used (user and system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _members(count: int, n: int, broker: Broker, root: str,
             parts: list[list[tuple[bytes, bytes]]], truth: Counter[bytes]
             ) -> tuple[float, float, float]:
    """Seconds for ``count`` members to process the ``n`` messages loaded once they settled,
    and the CPU seconds the broker and the members used meanwhile."""
    bootstrap = broker.bootstrap
    tag = uuid.uuid4().hex[:8]
    events, counts = f"w8k-events-{tag}", f"w8k-counts-{tag}"
    asyncio.run(_create_topics(bootstrap, [events, counts]))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
               [repo, *filter(None, [os.environ.get("PYTHONPATH")])]), "W8K_JOB": f"w8k-{tag}", "W8K_BOOTSTRAP": bootstrap,
           "W8K_EVENTS": events, "W8K_COUNTS": counts}
    logs = [Path(root) / f"member-{tag}-{i}.log" for i in range(count)]
    procs = []
    for i, log in enumerate(logs):
        with log.open("wb") as out:
            procs.append(subprocess.Popen(
                [CLI, "run", f"{os.path.abspath(__file__)}:app", "--follow", "-q",
                 "-c", f"job.dir={os.path.join(root, f'job-{tag}-{i}')}", *GROUP],
                env=env, stdout=out, stderr=subprocess.STDOUT))
    try:
        deadline = time.monotonic() + 120
        while not _settled(logs, procs):
            if time.monotonic() > deadline:
                tails = "\n".join(f"{log.name}:\n{log.read_text(errors='replace')[-1500:]}"
                                  for log in logs)
                raise RuntimeError(f"W8K: the members did not settle within 120 s:\n{tails}")
            time.sleep(0.2)
        for p in procs:  # the input is loaded while they wait (within the session timeout)
            p.send_signal(signal.SIGSTOP)
        began = time.monotonic()
        asyncio.run(_load(bootstrap, events, parts))
        if time.monotonic() - began > SESSION_S * 0.5:
            raise RuntimeError("W8K: loading the input took more than half the session "
                               "timeout: run with a smaller --scale")
        cpu = [_cpu(pid_of(broker)), sum(_cpu(p.pid) for p in procs)]
        t0 = time.perf_counter()
        for p in procs:
            p.send_signal(signal.SIGCONT)
        t1 = asyncio.run(_wait_output(bootstrap, counts, n, time.monotonic() + 600))
        cpu = [_cpu(pid_of(broker)) - cpu[0], sum(_cpu(p.pid) for p in procs) - cpu[1]]
        _check(f"{count} member(s)", asyncio.run(_read_back(bootstrap, counts, n)), n, truth)
        return t1 - t0, cpu[0], cpu[1]
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def run_w8k(n: int, broker_kind: str = "tansu") -> dict[str, Any]:
    parts = w7_input(n)
    truth = Counter(key for records in parts for key, _ in records)
    root = tempfile.mkdtemp(prefix="w8k-")
    broker = start_broker(broker_kind)
    try:
        got = {count: _members(count, n, broker, root, parts, truth) for count in (1, 2)}
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    return emit("W8K", {"messages": n, "partitions": PARTITIONS, "members": 2,
                        "system": system_of(broker_kind), "cores": os.cpu_count()},
                n, got[2][0], "w1-kafka-1-member", n / got[1][0],
                one_member_seconds=round(got[1][0], 3),
                broker_cpu_s={k: round(v[1], 2) for k, v in got.items()},
                members_cpu_s={k: round(v[2], 2) for k, v in got.items()},
                load_avg_1m=round(os.getloadavg()[0], 2))
