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

Runs in separate processes differ by far more than 5% on a shared machine (the same W1L run
took from 8 to 13 CPU seconds, whatever was asked). ``--phases SECONDS`` measures within one
run instead: one W1L job with the endpoint on, and one client that asks it for a phase, then
a stand-in for a phase, and so on, while a thread of the job's process counts the messages
processed every 20 ms. Each phase with queries is compared with the mean of the phases just
before and after it (without), so the machine's drift cancels; prints each phase and the
median of those ratios as the query cost:

    python benchmarks/query_cost.py --phases 2 --scale 10 --rate 40
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


def _ask(qc: Any, rnd: random.Random) -> bool:
    """One query of the mix (module docstring); False if it was answered with an error."""
    from samza_dsl.query import QueryError

    key = str(rnd.randint(1, 10_000))
    kind = rnd.random()
    try:
        if kind < 0.8:
            qc.get("counts", key)
        elif kind < 0.9:
            qc.get("counts", key, read="committed")
        else:
            qc.prefix("counts", key[:2], limit=10)
    except QueryError:
        return False
    return True


def phased_client(job_dir: str, stand_in_dir: str, rate: float, phase_s: float) -> None:
    """Asks a stand-in for a phase, then the job for a phase, and so on, at ``rate`` queries a
    second, until SIGTERM; prints each phase's start (``time.monotonic``: the same clock in
    every process of the machine) and whom it asked."""
    from samza_dsl.query import QueryClient

    def url(root: str) -> str:
        record = os.path.join(root, "query", "container-0.json")
        while not os.path.exists(record):
            time.sleep(0.002)
        time.sleep(0.01)
        with open(record) as f:
            return str(json.load(f)["url"])

    phases: list[tuple[float, bool]] = []

    def done(*_: Any) -> None:
        print(json.dumps({"phases": phases}), flush=True)
        os._exit(0)
    signal.signal(signal.SIGTERM, done)
    print("ready", flush=True)
    clients = {False: QueryClient([url(stand_in_dir)], timeout=5),
               True: QueryClient([url(job_dir)], timeout=5)}
    rnd = random.Random(7)
    step = 1.0 / rate
    asking = False
    switch = time.monotonic()
    phases.append((switch, asking))
    next_at = switch
    while True:
        now = time.monotonic()
        if now >= switch + phase_s:
            asking = not asking
            switch += phase_s
            phases.append((switch, asking))
        _ask(clients[asking], rnd)
        next_at += step
        time.sleep(max(0.0, next_at - time.monotonic()))


def phased_run(n: int, rate: float, phase_s: float) -> dict[str, Any]:
    """One W1L run with the endpoint on, asked every other phase (module docstring)."""
    import threading

    from benchmarks.local_workloads import _config, _events, _ids, _load
    from examples.readwrite_counter import app
    from runtime.runner import LocalRunner

    d = tempfile.mkdtemp(prefix="w1l-query-")
    other = tempfile.mkdtemp(prefix="w1l-stand-in-")
    asker = standin = None
    try:
        config = _config(d)
        assert _load(app, config, _events(_ids(n))) == n
        config = {**config, "query.enabled": True}
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        standin = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--stand-in",
                                    other], stdout=subprocess.PIPE, text=True)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        assert standin.stdout is not None and standin.stdout.readline().strip() == "ready"
        asker = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--client", d,
                                  "--stand-in-dir", other, "--rate", str(rate),
                                  "--phases", str(phase_s)], stdout=subprocess.PIPE, text=True)
        assert asker.stdout is not None and asker.stdout.readline().strip() == "ready"
        runner = LocalRunner(app, config)
        samples: list[tuple[float, int]] = []
        cpu: list[tuple[float, dict[str, float]]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.02):
                c = runner.container
                if c is not None:
                    samples.append((time.monotonic(), sum(t.processed for t in list(c.tasks))))
                    cpu.append((samples[-1][0], _thread_cpu()))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        runner.start()
        runner.wait()
        stop.set()
        sampler.join()
        asker.send_signal(signal.SIGTERM)
        out, _ = asker.communicate(timeout=30)
        phases = json.loads(out.splitlines()[-1])["phases"]
        runner.stop()
        runner.close()
    finally:
        for proc in (asker, standin):
            if proc is not None and proc.poll() is None:
                proc.kill()
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)
    out = _phase_rates(samples, phases, phase_s)
    out["thread_cpu_share"] = _phase_cpu(cpu, phases, phase_s, samples)
    return out


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process (Linux's /proc), by its name in Python."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = names.get(int(tid), "other")
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _phase_cpu(cpu: list[tuple[float, dict[str, float]]], phases: list[list[Any]],
               phase_s: float, samples: list[tuple[float, int]]) -> dict[str, Any]:
    """Per thread, its share of a core in the phases with queries and in those without."""
    import bisect

    times = [t for t, _ in cpu]
    busy = [t for t, p in samples if 0 < p < samples[-1][1]]
    share: dict[bool, dict[str, list[float]]] = {True: {}, False: {}}
    for start, asking in phases:
        a, b = start + phase_s / 10, start + phase_s * 0.9
        if not busy or a < busy[0] or b > busy[-1]:
            continue
        i, j = bisect.bisect_left(times, a), bisect.bisect_right(times, b) - 1
        if j <= i:
            continue
        (t0, c0), (t1, c1) = cpu[i], cpu[j]
        for name in c1:
            share[bool(asking)].setdefault(name, []).append(
                (c1[name] - c0.get(name, 0.0)) / (t1 - t0))
    return {("asked" if k else "not asked"): {n: round(statistics.median(v), 3)
                                              for n, v in d.items()}
            for k, d in share.items()}


def _phase_rates(samples: list[tuple[float, int]], phases: list[list[Any]],
                 phase_s: float) -> dict[str, Any]:
    """Messages a second in each whole phase of the run (a tenth of the phase left out at each
    end, as the client switches), and each asked phase against the mean of its neighbours."""
    import bisect

    times = [t for t, _ in samples]
    busy = [(t, p) for t, p in samples if 0 < p < samples[-1][1]]
    if len(busy) < 2:
        raise SystemExit("the run was too short to sample: raise --scale")
    lo, hi = busy[0][0], busy[-1][0]
    margin = phase_s / 10
    rates: list[tuple[bool, float]] = []
    for start, asking in phases:
        a, b = start + margin, start + phase_s - margin
        if a < lo or b > hi:
            continue
        i, j = bisect.bisect_left(times, a), bisect.bisect_right(times, b) - 1
        if j <= i:
            continue
        (t0, p0), (t1, p1) = samples[i], samples[j]
        rates.append((bool(asking), (p1 - p0) / (t1 - t0)))
    costs = [100 * (1 - r / ((rates[k - 1][1] + rates[k + 1][1]) / 2))
             for k, (asking, r) in enumerate(rates)
             if asking and 0 < k < len(rates) - 1 and not rates[k - 1][0]
             and not rates[k + 1][0]]
    return {"workload": "W1L", "phase_s": phase_s,
            "phases": [[asking, round(r)] for asking, r in rates],
            "phase_costs_percent": [round(c, 1) for c in costs],
            "query_cost_percent": round(statistics.median(costs), 1) if costs else None,
            "mean_cost_percent": round(statistics.fmean(costs), 1) if costs else None,
            "median_95_percent_interval": _median_interval(costs)}


def _median_interval(costs: list[float], resamples: int = 10_000) -> list[float] | None:
    """The 95% bootstrap interval of the median of ``costs`` (percentile method, a fixed
    seed: the same phases give the same interval)."""
    if len(costs) < 5:
        return None
    rnd = random.Random(66)
    medians = sorted(statistics.median(rnd.choices(costs, k=len(costs)))
                     for _ in range(resamples))
    return [round(medians[int(0.025 * resamples)], 1),
            round(medians[int(0.975 * resamples) - 1], 1)]


def client(job_dir: str, rate: float) -> None:
    """Asks the job at ``rate`` queries a second until SIGTERM; prints what it asked."""
    from samza_dsl.query import QueryClient

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
        counts["asked"] += 1
        if _ask(qc, rnd):
            counts["answered"] += 1
        else:  # e.g. committed before the first commit
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
    parser.add_argument("--stand-in-dir", help=argparse.SUPPRESS)
    parser.add_argument("--phases", type=float, default=None,
                        help="seconds: one run, asked every other phase (see above)")
    args = parser.parse_args()
    if args.client and args.phases:
        phased_client(args.client, args.stand_in_dir, args.rate, args.phases)
        return
    if args.client:
        client(args.client, args.rate)
        return
    if args.stand_in:
        stand_in(args.stand_in)
        return
    n = max(1, int(1_000_000 * args.scale))
    if args.phases:
        for _ in range(args.runs if args.runs != 5 else 1):
            print(json.dumps(phased_run(n, args.rate, args.phases)), flush=True)
        return
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
