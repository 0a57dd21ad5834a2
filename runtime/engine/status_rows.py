"""The parts of a job's status (``samza-dsl status``) that every system's status is made of:
its containers on this machine (from the lock files), a row per task and input partition, a
row per store, the last metrics snapshot and the consumer group. Each system's ``JobSystem``
(``runtime.engine.systems``) puts them together from what it reads; ``runtime.ops.status``
says them in text. What the status holds is documented in ``runtime.ops.status``.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from runtime.engine import checkpoints
from runtime.engine.job import SSP, JobModel, build_job_model
from runtime.host.job_lock import lock_dir, lock_holders
from runtime.host.jobdir import task_dir

__all__ = ["STATUS_VERSION", "containers", "partitions", "store_rows", "last_metrics",
           "job_model", "group_status"]

#: the version of the ``--json`` shape
STATUS_VERSION = 1

_RUN_NOTE = re.compile(r"run container (\d+) of (\d+)")
_START_NOTE = re.compile(r"start (\d+) containers")


def containers(root: str, ran: bool, configured: int, elsewhere: bool = False
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The job's containers and the live holders of its locks on this machine. A container
    no lock shows running has ``stopped`` (``never ran``: the job never ran; ``unknown``: it may
    run on another machine, with ``elsewhere``)."""
    holders = lock_holders(root)
    locks = [{"file": name, "pid": pid, "doing": note} for name, (pid, note) in holders.items()]
    running: dict[int, int] = {}
    count = None
    for name, (pid, note) in holders.items():
        m = _RUN_NOTE.fullmatch(note)
        if m and name == f"container-{m.group(1)}.lock":
            running[int(m.group(1))] = pid
            count = int(m.group(2))
        elif name == "job.lock" and note == "run":
            running[0], count = pid, 1
        elif name == "job.lock" and (m := _START_NOTE.fullmatch(note)):
            count = int(m.group(1))
    seen = {int(m.group(1)) for p in glob.glob(os.path.join(lock_dir(root), "container-*.lock"))
            if (m := re.search(r"container-(\d+)\.lock$", p))}
    if count is None:
        count = max(configured, max(seen, default=-1) + 1) if seen or not ran else configured
    ids = sorted(set(range(count)) | set(running))
    idle = "unknown" if elsewhere else "stopped" if ran else "never ran"
    out = [{"id": i, "state": "running", "pid": running[i]} if i in running
           else {"id": i, "state": idle, "pid": None} for i in ids]
    return out, locks


def partitions(job: JobModel, records: Mapping[str, Mapping[str, Any]],
               bounds: Callable[[SSP], tuple[int, int] | None],
               timestamps: Mapping[str, int] | None = None, now: float | None = None
               ) -> list[dict[str, Any]]:
    """A row per task and partition it reads. ``bounds``: (start, end offset) of a partition,
    None where its stream does not exist; ``timestamps``: when the broker took each task's
    checkpoint (ms), for checkpoints that do not record it."""
    now = time.time() if now is None else now
    rows = []
    for t in job.tasks:
        data = records.get(t.name, {})
        offsets = checkpoints.offsets_of(data)
        written = checkpoints.written_of(data)
        if written is None and timestamps and t.name in timestamps:
            written = timestamps[t.name] / 1000.0
        for ssp in sorted(t.ssps):
            done = offsets.get(ssp)
            b = bounds(ssp)
            nxt = done + 1 if done is not None else (b[0] if b else None)
            end = b[1] if b else None
            rows.append({
                "task": t.name, "stream": ssp.stream_id, "partition": ssp.partition,
                "checkpointed_offset": done, "next_offset": nxt, "end_offset": end,
                "lag": max(0, end - nxt) if end is not None and nxt is not None else None,
                "checkpoint_written": None if done is None else written,
                "checkpoint_age_seconds": (round(max(0.0, now - written), 3)
                                           if done is not None and written is not None
                                           else None)})
    return rows


def store_rows(job: JobModel, roots: list[str],
               changelog: Callable[[str], tuple[str, int | None] | None]) -> list[dict[str, Any]]:
    """A row per store: its files' bytes on this machine under the job dirs ``roots`` (a
    consumer group's members on this machine each have one; none: the files are on other
    hosts), and its changelog's stream or topic with the offsets it spans (``changelog(store)``:
    (name, span or None), None: no changelog)."""
    rows = []
    tasks = {task_dir(t.name) for t in job.tasks}
    for name in sorted(job.plan.stores):
        paths = [os.path.abspath(os.path.join(root, "stores", name)) for root in roots]
        size, dirs = 0, 0
        for path in paths:
            if not os.path.isdir(path):
                continue
            for entry in os.listdir(path):
                dirs += entry in tasks
                for base, _, files in os.walk(os.path.join(path, entry)):
                    for f in files:
                        with contextlib.suppress(OSError):  # gone meanwhile (a reset)
                            size += os.stat(os.path.join(base, f)).st_size
        cl = changelog(name)
        rows.append({"store": name, "path": paths[0] if len(paths) == 1 else None,
                     "paths": paths, "exists": any(os.path.isdir(p) for p in paths),
                     "task_dirs": dirs, "bytes": size, "changelog": cl[0] if cl else None,
                     "changelog_offsets": cl[1] if cl else None})
    return rows


#: records read back from the end of each partition of the job's snapshot stream, at most
_SNAPSHOTS_READ = 2000


def _snapshots(log: Any, stream: str) -> dict[str, dict[str, Any]]:
    """The latest snapshot record of each container in the job's snapshot stream."""
    latest: dict[str, dict[str, Any]] = {}
    for p in range(log.partitions(stream) or 0):
        end = log.end_offset(stream, p)
        pos = max(log.start_offset(stream, p), end - _SNAPSHOTS_READ)
        while pos < end:
            first, records = log.read(stream, p, pos, 1024)
            if not records:
                break
            pos = first + len(records)
            for _, value, _ in records:
                try:
                    data = json.loads(value or b"null")
                except ValueError:  # not a snapshot: the stream is the job's, but data
                    continue
                if not isinstance(data, dict) or not isinstance(data.get("metrics"), list):
                    continue
                header = data.get("header") or {}
                name = str(header.get("container-name", ""))
                old = latest.get(name)
                if old is None or header.get("time", 0) >= old["header"].get("time", 0):
                    latest[name] = {"header": header, "metrics": data["metrics"]}
    return latest


def last_metrics(log: Any, stream: str, now: float | None = None) -> dict[str, Any] | None:
    """User messages processed and late messages dropped per window, summed over the last
    snapshot of each container of the job's last run in its snapshot stream; None when there
    is none."""
    latest = _snapshots(log, stream)
    if not latest:
        return None
    # a container of an earlier run last reported before the last run's containers started
    began = max(int(d["header"].get("reset-time", 0)) for d in latest.values())
    run = {n: d for n, d in latest.items() if int(d["header"].get("time", 0)) >= began}
    processed = 0
    late: dict[str, int] = {}
    for d in run.values():
        for m in d["metrics"]:
            value = m.get("value") if isinstance(m, dict) else None
            if not isinstance(value, int) or isinstance(value, bool):
                continue
            what = (m.get("group"), m.get("name"))
            if what == ("container", "process-envelopes"):
                processed += value
            elif what == ("operator", "late-messages-dropped"):
                op = str((m.get("labels") or {}).get("operator", ""))
                late[op] = late.get(op, 0) + value
    as_of = max(int(d["header"].get("time", 0)) for d in run.values()) / 1000.0
    return {"stream": stream, "containers": sorted(run), "as_of": as_of,
            "age_seconds": round(max(0.0, (now or time.time()) - as_of), 3),
            "processed": processed, "late_dropped": dict(sorted(late.items()))}


def job_model(plan: Any, counts: Mapping[str, int], factor: int | None) -> JobModel:
    """The job's tasks as the last run had them (its elasticity factor), else as configured."""
    return build_job_model(plan, counts, factor or plan.config.job.elasticity_factor)


def group_status(group: str, members: Mapping[str, Mapping[str, Any]],
                 rows: list[dict[str, Any]], records: Mapping[str, Mapping[str, Any]],
                 latest: int | None = None) -> dict[str, Any] | None:
    """The consumer group of a job (``group`` is its name) from its members' records: the
    members of the latest generation, their tasks and the tasks' lags; None for a job that never
    ran as a group. ``latest``: the latest generation any member wrote, those that left
    included (a member of an older one is gone, not an owner of tasks)."""
    if not members and not any("group_generation" in d for d in records.values()):
        return None
    lag: dict[str, int] = {}
    for r in rows:
        if r["lag"] is not None:
            lag[r["task"]] = lag.get(r["task"], 0) + r["lag"]
    gens = [int(m.get("generation", -1)) for m in members.values()]
    if latest is not None:
        gens.append(latest)
    generation = max(gens, default=None)
    current = {n: m for n, m in members.items() if m.get("generation") == generation}
    out: list[dict[str, Any]] = []
    for name, m in sorted(current.items()):
        active = list(m.get("active", []))
        out.append({"member": name, "host": m.get("host"), "container": m.get("container"),
                    "pid": m.get("pid"), "job_dir": m.get("job_dir"), "active": active, "standby": list(m.get("standby", [])),
                    "restoring": list(m.get("restoring", [])), "query": m.get("query"),
                    "lag": sum(lag.get(t, 0) for t in active)})
    owner = {t: m["member"] for m in out for t in m["active"]}
    took = [m["rebalance_s"] for m in current.values()
            if isinstance(m.get("rebalance_s"), int | float)]
    return {"group": group, "generation": generation, "members": out,
            "gone": sorted(n for n in members if n not in current),
            "last_rebalance": max((float(m["rebalance_at"]) for m in current.values()
                                   if "rebalance_at" in m), default=None),
            "last_rebalance_s": max(took) if took else None,
            "tasks": [{"task": t, "member": owner.get(t), "lag": lag.get(t),
                       "epoch": checkpoints.epoch_of(records.get(t))}
                      for t in sorted({r["task"] for r in rows}, key=_task_key)]}


def _task_key(name: str) -> tuple[int, str]:
    digits = "".join(c for c in name if c.isdigit())
    return (int(digits) if digits else -1, name)
