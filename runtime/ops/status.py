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

import time
from collections.abc import Mapping
from typing import Any

__all__ = ["status_text"]


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
                     f"{', '.join(m['active']) or 'none'}{standby}{restoring}; lag {m['lag']}"
                     + (f"; queries at {m['query']}" if m.get("query") else ""))
    if g["gone"]:
        lines.append(f"  gone (not in the latest generation): {', '.join(g['gone'])}")
    rows = [["TASK", "MEMBER", "LAG", "EPOCH"]]
    rows += [[t["task"], t["member"] or "-", "-" if t["lag"] is None else str(t["lag"]),
              str(t["epoch"])] for t in g["tasks"]]
    return lines + _table(rows)
