"""What ``samza-dsl status APP`` prints: where a job is, while it runs and after it stops.

- **Containers.** On this machine, the lock files in ``<job.dir>/locks`` (``runtime.host.job_lock``)
  tell which containers run now: an exclusive holder writes its PID there, and the PID is
  checked alive. Only the files are read, no lock is taken, so a job that runs or starts is
  never in the way of a status, nor a status in its way. A job on Kafka may run containers on
  other machines, which no lock here shows; nor do the brokers know them (the containers read
  their partitions without a consumer group): the status says so, and gives the time of the
  checkpoint topic's last write as the sign of life there is.
- **Partitions.** Per task and input partition: the checkpointed offset (the last one processed),
  the partition's end offset, the lag (end less the next offset to process; from the
  partition's start where there is no checkpoint) and the checkpoint's age. Checkpoints record
  when they were written (``runtime.engine.checkpoints``); an older one has no time on the local system
  (age unknown), and on Kafka its record's timestamp gives it.
- **Stores.** The bytes of each store's LMDB files under ``<job.dir>/stores`` on this machine,
  and the offsets its changelog spans (end less start offset, over its partitions; compaction
  may leave fewer records).
- **Generation** and **elasticity factor** of the last run (``runtime.engine.job``, ``runtime.engine.elastic``).
- **Group.** A job on Kafka run as a consumer group (``job.coordinator=kafka``): its members
  (container, host, process) with their active, standby and restoring tasks, as each wrote
  them into the checkpoint topic after its last rebalance (``runtime.kafka.group``); the group
  generation, the last rebalance and how long it took (the longest any member paused), and the
  lag of each task (the sum over its input partitions). A member of an older generation than the
  latest is gone (a lost host); a member that stopped cleanly said so and is not listed.
- **Metrics**: on the local system, where the job reports to its snapshot stream
  (``metrics.reporters=snapshot``; ``run --containers N --ui`` turns it on), the last snapshot of
  each container of its last run: user messages processed and late messages dropped per window,
  the numbers the job page and the Prometheus endpoint give.

``status_json`` is the ``--json`` shape (``docs/operations.md`` documents it; ``version`` says
which); ``status_text`` the human one. Nothing here writes to the job's files or topics.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from runtime.engine import checkpoints
from runtime.engine.job import SSP, JobModel, build_job_model
from runtime.host.job_lock import lock_dir, lock_holders
from runtime.host.jobdir import metrics_stream, task_dir
from samza_dsl.errors import SamzaError
from samza_dsl.jobconfig import job_config

__all__ = ["STATUS_VERSION", "local_status", "kafka_status", "status_text"]

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


def _model(plan: Any, counts: Mapping[str, int], factor: int | None) -> JobModel:
    """The job's tasks as the last run had them (its elasticity factor), else as configured."""
    return build_job_model(plan, counts, factor or plan.config.job.elasticity_factor)


def local_status(job: Any, now: float | None = None) -> dict[str, Any]:
    """The status of a job on the local system, from a ``LocalJob`` opened read-only."""
    cps = job.checkpoints
    log = cps.log
    gen, factor = (log.get_meta(f"{k}/{job.job_name}") for k in ("generation", "elasticity"))
    generation = int(gen) if gen else None
    model = _model(job.plan, job.counts, int(factor) if factor else None)

    def bounds(ssp: SSP) -> tuple[int, int] | None:
        lg, phys = job.log_of(job.stream_system[ssp.stream_id]), job.physical[ssp.stream_id]
        if lg.partitions(phys) is None:
            return None
        return lg.start_offset(phys, ssp.partition), lg.end_offset(phys, ssp.partition)

    def changelog(store: str) -> tuple[str, int | None] | None:
        spec = job.plan.stores[store]
        if not spec.changelog:
            return None
        system, stream = spec.changelog_system or job.main_system, str(spec.changelog_stream)
        lg = job.log_of(system)
        n = lg.partitions(stream)
        return stream, (None if n is None else
                        sum(lg.end_offset(stream, p) - lg.start_offset(stream, p)
                            for p in range(n)))

    records = cps.records()
    count = int(job.plan.config.job.container_count)
    conts, locks = containers(job.root, generation is not None, count)
    rows = partitions(model, records, bounds, now=now)
    written = [r["checkpoint_written"] for r in rows if r["checkpoint_written"] is not None]
    return {
        "version": STATUS_VERSION, "job": job.job_name, "system": "local",
        "job_dir": os.path.abspath(job.root), "generation": generation,
        "elasticity_factor": int(factor) if factor else None,
        "configured_elasticity_factor": int(job.plan.config.job.elasticity_factor),
        "containers": conts, "locks": locks, "containers_note": None, "group": None,
        "checkpoints": {"where": f"{log.path} (metadata checkpoint/{job.job_name}/<task>)",
                        "last_written": max(written, default=None)},
        "partitions": rows, "stores": store_rows(model, [job.root], changelog),
        "metrics": last_metrics(job.log_of(job.main_system), metrics_stream(job.job_name), now)}


async def kafka_status(app: Any, config: Mapping[str, Any], *, app_ref: str = "APP",
                       timeout: float = 10.0, now: float | None = None) -> dict[str, Any]:
    """The status of a job on Kafka: its checkpoint topic, its topics' offsets, the locks and
    stores under its job.dir on this machine. Errors name the brokers and what to do."""
    # what aiokafka logs on the way (a broker that does not answer) the errors here say once
    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        return await _kafka_status(app, config, app_ref, timeout, now)
    finally:
        quiet.setLevel(level)


async def _kafka_status(app: Any, config: Mapping[str, Any], app_ref: str, timeout: float,
                        now: float | None) -> dict[str, Any]:
    from aiokafka import TopicPartition

    from runtime.host.jobdir import job_dir
    from runtime.kafka.admin import describe_topics
    from runtime.kafka.group import host_name
    from runtime.kafka.load_dump import kafka_streams
    from runtime.kafka.security import security_settings
    from runtime.kafka.system import offset_bounds, read_checkpoint_topic

    streams = await kafka_streams(app, config, timeout=timeout)
    topic = f"__samza_checkpoint_{streams.job_name}"
    login = security_settings(streams.consumer_settings)
    if (await describe_topics(streams.servers, [topic], timeout=timeout, **login))[topic] is None:
        raise SamzaError(f"job {streams.job_name!r} has not run on the Kafka brokers at "
                         f"{streams.servers}: its checkpoint topic {topic!r} does not exist; "
                         f"run it first with `samza-dsl run {app_ref}`")
    cp = await read_checkpoint_topic(streams.servers, topic, streams.consumer_settings, timeout)
    model = _model(streams.plan, streams.counts, cp.elasticity)
    tps = {TopicPartition(streams.physical[s.stream_id], s.partition)
           for t in model.tasks for s in t.ssps if streams.topics.get(streams.physical[s.stream_id])}
    tps |= {TopicPartition(tp, p) for tp in streams.changelogs.values()
            for p in range(streams.topics.get(tp) or 0)}
    got = await offset_bounds(streams.servers, dict.fromkeys(tps), streams.consumer_settings,
                              timeout, what="reading the offsets of the job's topics")

    def bounds(ssp: SSP) -> tuple[int, int] | None:
        return got.get(TopicPartition(streams.physical[ssp.stream_id], ssp.partition))

    def changelog(store: str) -> tuple[str, int | None] | None:
        name = streams.changelogs.get(store)
        if name is None:
            return None
        n = streams.topics.get(name)
        return name, (None if n is None else
                      sum(got[TopicPartition(name, p)][1] - got[TopicPartition(name, p)][0]
                          for p in range(n)))

    rows = partitions(model, cp.data, bounds, cp.timestamps, now=now)
    group = group_status(streams.job_name, cp.members, rows, cp.data, cp.member_generation)
    last = None if cp.last_write is None else cp.last_write / 1000.0
    common = {
        "version": STATUS_VERSION, "job": streams.job_name, "system": "kafka",
        "bootstrap_servers": streams.servers, "elasticity_factor": cp.elasticity,
        "configured_elasticity_factor": int(streams.plan.config.job.elasticity_factor),
        "checkpoints": {"where": f"topic {topic}", "last_written": last},
        "partitions": rows, "group": group, "metrics": None}
    root = os.path.abspath(job_dir(streams.job_name, job_config(app, config)))
    if group is not None and group["members"]:
        # a consumer group: its members' own job dirs (those on this machine hold its stores'
        # files and its containers' locks); nothing of a job.dir another run left here
        mine = [m["job_dir"] for m in group["members"]
                if m.get("job_dir") and m["host"] == host_name()]
        conts, locks = containers(root, True, 0, elsewhere=True) if root in mine else ([], [])
        return {**common, "job_dir": None, "generation": cp.generation,
                "containers": conts, "locks": locks,
                "containers_note": f"the job runs as the consumer group {streams.job_name!r}: "
                                   f"its members, on every host, are listed under the group",
                "stores": store_rows(model, mine, changelog)}
    count = int(streams.plan.config.job.container_count)
    conts, locks = containers(root, cp.generation is not None, count, elsewhere=True)
    age = "" if last is None else f" {max(0.0, (now or time.time()) - last):.1f} s ago"
    note = (f"only containers on this machine show running (by their locks in {lock_dir(root)});"
            f" containers on other machines cannot be seen from here, and the brokers do not "
            f"know them either (they read without a consumer group). The checkpoint topic "
            f"{topic!r} was last written{age or ': never'}")
    return {**common, "job_dir": root, "generation": cp.generation,
            "containers": conts, "locks": locks, "containers_note": note,
            "stores": store_rows(model, [root], changelog)}


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


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]


def status_text(s: Mapping[str, Any]) -> str:
    """The status for a terminal: a few lines per section."""
    where = (f"Kafka at {s['bootstrap_servers']}" if s["system"] == "kafka"
             else "the local system")
    gen = s["generation"]
    group = s.get("group")
    group = group if group and group["members"] else None
    lines = [f"job {s['job']} on {where} " + (
                 f"(the consumer group {group['group']}; each member's job.dir below)"
                 if group else f"(job.dir {s['job_dir']})"),
             (f"{'consumer group ' if group else ''}generation "
              f"{group['generation'] if group else gen}, elasticity factor "
              f"{s['elasticity_factor'] or 1}" if gen is not None
              else "never ran: no generation yet")
             + (f" (configured: {s['configured_elasticity_factor']})"
                if (s["elasticity_factor"] or 1) != s["configured_elasticity_factor"] else ""),
             "containers:"]
    for c in s["containers"]:
        pid = f", pid {c['pid']}" if c["pid"] is not None else ""
        lines.append(f"  container {c['id']}: {c['state']}{pid}")
    lines += [f"  process {lk['pid']} holds {lk['file']} (`{lk['doing']}`)" for lk in s["locks"]
              if lk["file"] == "job.lock" and lk["doing"] != "run"]
    if s["containers_note"]:
        lines.append(f"  note: {s['containers_note']}")
    last = s["checkpoints"]["last_written"]
    lines.append(f"checkpoints in {s['checkpoints']['where']}; last written "
                 f"{'never' if last is None else _age(max(0.0, time.time() - last)) + ' ago'}")
    if s["partitions"]:
        rows = [["TASK", "STREAM", "PARTITION", "CHECKPOINTED", "END", "LAG", "CHECKPOINT AGE"]]
        for r in s["partitions"]:
            rows.append([r["task"], r["stream"], str(r["partition"]),
                         "-" if r["checkpointed_offset"] is None else str(r["checkpointed_offset"]),
                         "-" if r["end_offset"] is None else str(r["end_offset"]),
                         "-" if r["lag"] is None else str(r["lag"]),
                         "-" if r["checkpointed_offset"] is None
                         else _age(r["checkpoint_age_seconds"])])
        lines += ["partitions:", *_table(rows)]
    lines += _group_lines(s.get("group"))
    m = s.get("metrics")
    if m:
        late = ", ".join(f"{op} {n:,}" for op, n in m["late_dropped"].items()) or "none"
        lines.append(f"metrics (the last snapshot of {', '.join(m['containers'])} in "
                     f"{m['stream']}, {_age(m['age_seconds'])} ago): processed "
                     f"{m['processed']:,}; late dropped: {late}")
    if s["stores"]:
        lines.append("stores:")
        for st in s["stores"]:
            under = st["path"] or ", ".join(st["paths"]) or "the members' job dirs"
            files = (f"{st['bytes']:,} bytes in {st['task_dirs']} task dir(s) under {under}"
                     if st["exists"] else f"no files on this machine ({under})")
            cl = "" if st["changelog"] is None else (
                f"; changelog {st['changelog']}: " + ("does not exist" if st["changelog_offsets"]
                                                      is None else
                                                      f"{st['changelog_offsets']:,} offsets"))
            lines.append(f"  {st['store']}: {files}{cl}")
    return "\n".join(lines) + "\n"


def _group_lines(g: Mapping[str, Any] | None) -> list[str]:
    """The consumer group's section of ``status_text``."""
    if not g:
        return []
    when = ("never" if g["last_rebalance"] is None
            else _age(max(0.0, time.time() - g["last_rebalance"])) + " ago")
    took = "" if g["last_rebalance_s"] is None else f", took {g['last_rebalance_s']:.2f} s"
    lines = [f"consumer group {g['group']}: generation {g['generation']}, "
             f"{len(g['members'])} member(s); last rebalance {when}{took}"]
    for m in g["members"]:
        standby = f"; standby {', '.join(m['standby'])}" if m["standby"] else ""
        restoring = f"; restoring {', '.join(m['restoring'])}" if m["restoring"] else ""
        where = f", job.dir {m['job_dir']}" if m.get("job_dir") else ""
        lines.append(f"  member {m['member']} (host {m['host']}, pid {m['pid']}{where}): active "
                     f"{', '.join(m['active']) or 'none'}{standby}{restoring}; lag {m['lag']}")
    if g["gone"]:
        lines.append(f"  gone (not in the latest generation): {', '.join(g['gone'])}")
    rows = [["TASK", "MEMBER", "LAG", "EPOCH"]]
    rows += [[t["task"], t["member"] or "-", "-" if t["lag"] is None else str(t["lag"]),
              str(t["epoch"])] for t in g["tasks"]]
    return lines + _table(rows)
