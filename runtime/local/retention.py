"""Trimming of the embedded local log, so a long-running job's disk use stays bounded.

- **Intermediate streams** (``partition_by`` outputs, broadcasts) are trimmed below the lowest
  checkpoint of every task that consumes each partition, across all containers of the job and
  all virtual tasks (``job.elasticity.factor``): a record every consumer has checkpointed past
  is never read again, as Samza deletes consumed intermediate messages. A consumer with no
  checkpoint yet keeps the whole partition.
- **Inputs and outputs** get Kafka-style retention: ``streams.<id>.retention.ms`` deletes the
  segments appended longer ago than that, ``streams.<id>.retention.bytes`` the oldest segments
  while the partition holds more than that (default -1 for both: keep forever).

Only whole segments (appended batches) go, and offsets never change. A partition's last segment
always stays: it holds the end offset. A container trims the partitions its tasks read or write
after its commits, at most every ``TRIM_SECONDS``; a job with neither intermediate streams nor
retention has nothing to do and does nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from runtime.engine.job import SSP, JobModel
from runtime.local.log import LocalLog
from samza_dsl.errors import ConfigError
from samza_dsl.jobconfig import JobConfig

__all__ = ["TRIM_SECONDS", "LogTrimmer", "Target", "retention_point", "consumed_point",
           "log_max_bytes", "LOG_MAX_BYTES_DEFAULT"]

log = logging.getLogger("samza_dsl.retention")

TRIM_SECONDS = 5.0  # a container trims at most this often
LOG_MAX_BYTES_DEFAULT = 1 << 36  # 64 GiB: the default size cap of a local log
_LOG_MAX_BYTES_MIN = 1 << 20


def log_max_bytes(config: JobConfig, system: str) -> tuple[int, str]:
    """The size cap of a local system's log (``systems.<name>.log.max.bytes``) and its key."""
    key = f"systems.{system}.log.max.bytes"
    value = config.system(system).log_max_bytes
    if value is None:
        return LOG_MAX_BYTES_DEFAULT, key
    try:
        n = int(str(value).strip().replace("_", ""))
    except ValueError:
        n = -1
    if n < _LOG_MAX_BYTES_MIN:
        raise ConfigError(f"config {key}={value!r} must be a whole number of bytes >= "
                          f"{_LOG_MAX_BYTES_MIN} (1 MiB); the default is {LOG_MAX_BYTES_DEFAULT} "
                          f"(64 GiB)")
    return n, key


def retention_point(segments: list[tuple[int, int, int, int]], now_ms: int, retention_ms: int,
                    retention_bytes: int) -> int:
    """The offset below which retention deletes a partition's ``segments`` (as
    ``LocalLog.segments`` gives them): those older than ``retention_ms`` and, oldest first,
    those whose removal leaves at least ``retention_bytes`` (-1: no limit)."""
    below = 0
    if retention_ms >= 0:
        horizon = now_ms - retention_ms
        for first, span, ts, _ in segments:
            if ts >= horizon:
                break
            below = first + span
    if retention_bytes >= 0:
        excess = sum(s[3] for s in segments) - retention_bytes
        for first, span, _, size in segments:
            if excess - size < 0:
                break
            excess -= size
            below = max(below, first + span)
    return below


def consumed_point(offsets: list[int | None]) -> int:
    """The offset below which every consumer has checkpointed (the checkpoint holds the last
    processed offset); 0 when one has no checkpoint."""
    if not offsets or any(o is None for o in offsets):
        return 0
    return min(o for o in offsets if o is not None) + 1


@dataclass
class Target:
    """A partition to trim: ``consumers`` names the tasks whose checkpoints bound it (an
    intermediate stream), else ``retention_ms``/``retention_bytes`` apply."""

    log: LocalLog
    stream_id: str
    physical: str
    partition: int
    consumers: list[str] | None = None
    retention_ms: int = -1
    retention_bytes: int = -1


class LogTrimmer:
    """Trims a container's partitions (see the module docstring). ``maybe_run()`` after each
    commit; ``checkpoints()`` gives every task's checkpointed offsets."""

    def __init__(self, targets: list[Target],
                 checkpoints: Callable[[], Mapping[str, Mapping[SSP, int]]],
                 interval: float = TRIM_SECONDS) -> None:
        self.targets = targets
        self.checkpoints = checkpoints
        self.interval = interval
        self._last = time.monotonic()
        #: offsets trimmed so far, per (stream id, partition)
        self.trimmed: dict[tuple[str, int], int] = {}

    def maybe_run(self) -> None:
        if not self.targets:
            return
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        self.run()

    def run(self) -> int:
        """One pass over every target; the offsets trimmed."""
        total = 0
        cps: Mapping[str, Mapping[SSP, int]] | None = None
        now_ms = int(time.time() * 1000)
        for t in self.targets:
            try:
                if t.consumers is not None:
                    if cps is None:
                        cps = self.checkpoints()
                    ssp = SSP(t.stream_id, t.partition)
                    below = consumed_point([cps.get(name, {}).get(ssp) for name in t.consumers])
                else:
                    below = retention_point(t.log.segments(t.physical, t.partition), now_ms,
                                            t.retention_ms, t.retention_bytes)
                if below <= 0:
                    continue
                gone = t.log.trim(t.physical, t.partition, below)
            except Exception as exc:  # the job goes on; the partition just stays longer
                log.warning("trimming stream %s partition %d in %s failed (%s: %s); the job goes "
                            "on with the partition as it is", t.stream_id, t.partition,
                            t.log.path, type(exc).__name__, exc)
                continue
            if gone:
                key = (t.stream_id, t.partition)
                self.trimmed[key] = self.trimmed.get(key, 0) + gone
                total += gone
                log.debug("trimmed %d offsets of stream %s partition %d below %d", gone,
                          t.stream_id, t.partition, below)
        return total


def job_targets(job: JobModel, config: JobConfig, tasks: list[str],
                physical: Mapping[str, str], counts: Mapping[str, int],
                log_of: Callable[[str], LocalLog]) -> list[Target]:
    """The partitions a container trims: those of intermediate streams its ``tasks`` read (each
    bounded by every consuming task of the job), and every partition of an input or output
    with retention set (by the container that runs the job's first task, or by each when the
    container reads it)."""
    mine = set(tasks)
    out: list[Target] = []
    for sid, s in job.plan.streams.items():
        n = counts.get(sid, 0)
        if s.kind in ("intermediate", "broadcast"):
            for p in range(n):
                ssp = SSP(sid, p)
                consumers = [t.name for t in job.tasks if ssp in t.ssps]
                if consumers and mine.intersection(consumers):
                    out.append(Target(log_of(sid), sid, physical[sid], p, consumers))
        elif s.kind in ("input", "output"):
            ms = config.stream(sid).retention_ms
            size = config.stream(sid).retention_bytes
            if ms < 0 and size < 0:
                continue
            first = job.tasks[0].name if job.tasks else None
            for p in range(n):
                ssp = SSP(sid, p)
                readers = {t.name for t in job.tasks if ssp in t.ssps}
                if mine.intersection(readers) or (not readers and first in mine):
                    out.append(Target(log_of(sid), sid, physical[sid], p, None, ms, size))
    return out


