"""W9, the soak (see docs/benchmarks.md): a ``--follow`` W1 job on the embedded system under steady load
for N minutes; the disk use of its job.dir and its RSS over time. Baseline: the size and RSS at
the first interval (a minute by default).

The job (``examples/readwrite_counter.py``, W1L's counter with its LMDB table and changelog)
runs as ``samza-dsl run --follow`` in its own process, with ``streams.<id>.retention.ms`` set on
its input and output; this process appends W1's events to its input at a steady rate, in a
load every ``TICK`` seconds. Every ``--interval`` seconds one JSON line gives job.dir's bytes
(allocated: ``st_blocks * 512``, and apparent), the job's RSS, the messages loaded so far,
and the embedded log's file against the bytes each stream's segments hold in it;
the last line says whether the size at the end is at most 1.5 times the first interval's.

    python benchmarks/soak.py --minutes 5 --interval 30 --rate 5000

With ``--ttl SECONDS`` the job is examples/readwrite_counter_ttl.py, whose table forgets a
count ``SECONDS`` after it was written, and every event has a key never seen before (10^6
distinct keys an hour is ``--rate 278``): the table then holds the keys of the last ``SECONDS``,
and its files and the RSS stay flat once the run is longer than the ttl: the changelog keeps
one ttl's writes at most (runtime.local.compaction, *Expiry*). The summary then also compares
the end with the first sample from two ttls on (``steady_*``), and ``bounded`` is said of
that.

    python benchmarks/soak.py --minutes 10 --interval 60 --rate 278 --ttl 120
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from examples.readwrite_counter import app as counter_app  # noqa: E402
from runtime.local.system import LocalJob  # noqa: E402
from samza_dsl import KV  # noqa: E402

TICK = 0.25  # seconds between two loads
LIMIT = 1.5  # the size at the end, at most, against the first interval's
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
APP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   "examples", "readwrite_counter.py") + ":app"


def disk_use(path: str) -> tuple[int, int]:
    """(bytes allocated, apparent bytes) of every file under ``path``."""
    allocated = apparent = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            allocated += st.st_blocks * 512
            apparent += st.st_size
    return allocated, apparent


def rss_bytes(pid: int) -> int:
    """The resident set of a process and its children (a job of one container is one)."""
    total = 0
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open(f"/proc/{p}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def log_bytes(job: LocalJob) -> tuple[int, dict[str, int]]:
    """(the allocated bytes of the embedded log's file, the bytes each stream's segments hold
    in it): what the log holds against what its file takes."""
    lg = job.log_of(job.main_system)
    by_stream = {name: sum(seg[3] for p in range(partitions) for seg in lg.segments(name, p))
                 for name, partitions in sorted(lg.streams().items())}
    return disk_use(lg.path)[0], by_stream


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--interval", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--rate", type=int, default=5000, help="input messages per second")
    ap.add_argument("--retention-ms", type=int, default=None,
                    help="streams.<id>.retention.ms of the input and output (default: the "
                         "interval)")
    ap.add_argument("--dir", default=None, help="job.dir (default: a new temporary directory)")
    ap.add_argument("--ttl", type=float, default=None,
                    help="seconds: the table forgets a count that long after its write, and "
                         "each event has a new key (examples/readwrite_counter_ttl.py)")
    args = ap.parse_args(argv)
    app, app_path = counter_app, APP
    if args.ttl is not None:
        os.environ["READWRITE_TTL_SECONDS"] = str(args.ttl)  # the job's process reads it too
        from examples.readwrite_counter_ttl import app
        app_path = APP.replace("readwrite_counter.py", "readwrite_counter_ttl.py")
    retention = args.retention_ms if args.retention_ms is not None else int(args.interval * 1000)
    job_dir = args.dir or tempfile.mkdtemp(prefix="soak-")
    if args.dir is None:
        atexit.register(shutil.rmtree, job_dir, True)
    config = {"job.dir": job_dir, "streams.events.retention.ms": retention,
              "streams.counts.retention.ms": retention}
    loader = LocalJob(app, config, run=False)  # creates the streams
    cmd = [CLI, "run", app_path, "--follow", "-q"]
    for k, v in config.items():
        cmd += ["-c", f"{k}={v}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    rnd = random.Random(1)
    loaded = 0
    samples: list[dict[str, Any]] = []
    t0 = time.monotonic()
    next_sample = t0 + args.interval
    end = t0 + args.minutes * 60
    per_tick = max(1, round(args.rate * TICK))
    try:
        while True:
            now = time.monotonic()
            if proc.poll() is not None:
                raise SystemExit(f"the job exited early with code {proc.returncode}")
            if now >= next_sample:
                allocated, apparent = disk_use(job_dir)
                line = {"workload": "W9", "seconds": round(now - t0, 1),
                        "job_dir_bytes": allocated, "job_dir_apparent_bytes": apparent,
                        "rss_bytes": rss_bytes(proc.pid), "messages_loaded": loaded,
                        "retention_ms": retention, "rate": args.rate,
                        "stores_bytes": disk_use(os.path.join(job_dir, "stores"))[0]}
                line["log_file_bytes"], line["stream_bytes"] = log_bytes(loader)
                samples.append(line)
                print(json.dumps(line), flush=True)
                next_sample += args.interval
                if now >= end:
                    break
            ids = ([rnd.randint(1, 10_000) for _ in range(per_tick)] if args.ttl is None
                   else list(range(loaded, loaded + per_tick)))  # a new key each
            loaded += loader.load("events", (KV(str(i), {"id": i, "pad": "x" * 100})
                                             for i in ids))
            time.sleep(max(0.0, t0 + (loaded / args.rate) - time.monotonic()))
    finally:
        loader.close()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    first, last = samples[0], samples[-1]
    steady: dict[str, Any] = {}
    if args.ttl is not None:
        # the table fills for one ttl; the changelog holds the writes of the last ttl, its
        # keys' puts and, from the first ttl on, the tombstones of the keys that expired: from
        # two ttls on, the sizes hold still
        settled = [s for s in samples if s["seconds"] >= 2 * args.ttl]
        if len(settled) >= 2:
            base = settled[0]
            steady = {"steady_from_s": base["seconds"],
                      "steady_first_job_dir_bytes": base["job_dir_bytes"],
                      "steady_ratio": round(last["job_dir_bytes"] / base["job_dir_bytes"], 3),
                      "steady_rss_ratio": round(last["rss_bytes"] / base["rss_bytes"], 3),
                      "steady_job_dir_range": [min(s["job_dir_bytes"] for s in settled),
                                               max(s["job_dir_bytes"] for s in settled)],
                      "steady_rss_range": [min(s["rss_bytes"] for s in settled),
                                           max(s["rss_bytes"] for s in settled)]}
            first = base
    ok = last["job_dir_bytes"] <= LIMIT * first["job_dir_bytes"]
    print(json.dumps({**steady,
        "workload": "W9", "summary": True, "minutes": args.minutes, "interval": args.interval,
        "first_job_dir_bytes": first["job_dir_bytes"], "end_job_dir_bytes": last["job_dir_bytes"],
        "ratio": round(last["job_dir_bytes"] / max(1, first["job_dir_bytes"]), 3),
        "first_rss_bytes": first["rss_bytes"], "end_rss_bytes": last["rss_bytes"],
        "rss_ratio": round(last["rss_bytes"] / max(1, first["rss_bytes"]), 3),
        "messages_loaded": loaded, "ttl_s": args.ttl, "bounded": ok, "limit": LIMIT}),
        flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
