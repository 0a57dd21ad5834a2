"""The job model: which tasks exist, which stream partitions and stages each task owns.

As in Samza's default grouper, task ``Partition i`` owns partition ``i`` of every (non-broadcast)
input stream that has one, so a job has as many tasks as its widest input. Broadcast streams have
one partition, read by every task. A task runs the stages whose inputs it owns partitions of.

With ``job.elasticity.factor`` X > 1 (docs/semantics.md rule 18) each task is split into X virtual
tasks, ``Partition i bucket b of X``: they share partition ``i`` of each input, and each takes the
messages of its key bucket (``runtime.engine.elastic``). Broadcast partitions go to every virtual task.

With ``job.container.count`` N > 1 the tasks are dealt out to N containers in task order, the
k-th task to container k mod N.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from planner import ExecutionPlan, Stage
from samza_dsl.errors import ConfigError
from samza_dsl.jobconfig import JobConfig

__all__ = ["SSP", "TaskModel", "JobModel", "build_job_model", "container_tasks", "job_containers",
           "start_generation", "task_name"]


class SSP(NamedTuple):
    """A system stream partition (a tuple, so hashing it per message is cheap)."""

    stream_id: str
    partition: int

    def __str__(self) -> str:
        return f"{self.stream_id}[{self.partition}]"


@dataclass
class TaskModel:
    name: str
    #: the task's place among the job's tasks (its changelog partition)
    index: int
    ssps: list[SSP] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)
    #: the input partition the task reads, and its key bucket among ``buckets`` virtual tasks
    partition: int = -1
    bucket: int = 0
    buckets: int = 1

    def __post_init__(self) -> None:
        if self.partition < 0:
            self.partition = self.index


def task_name(partition: int, bucket: int = 0, buckets: int = 1) -> str:
    if buckets == 1:
        return f"Partition {partition}"
    return f"Partition {partition} bucket {bucket} of {buckets}"


@dataclass
class JobModel:
    plan: ExecutionPlan
    partitions: dict[str, int]
    tasks: list[TaskModel]
    #: intermediate stream id -> number of tasks producing into it (end-of-stream and watermark
    #: control messages are counted against it)
    producers: dict[str, int]
    #: what the plan says about event time, worked out once (``runtime.engine.watermarks.job_time``)
    time: Any = field(default=None, init=False, repr=False, compare=False)

    def producer_names(self) -> dict[str, frozenset[str]]:
        """Intermediate stream id -> the names of the tasks that write into it."""
        names: dict[str, set[str]] = {}
        for t in self.tasks:
            for stage in t.stages:
                for sid in stage.outputs:
                    if sid in self.producers:
                        names.setdefault(sid, set()).add(t.name)
        return {sid: frozenset(n) for sid, n in names.items()}

    def task(self, name: str) -> TaskModel:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(name)


def build_job_model(plan: ExecutionPlan, partitions: Mapping[str, int],
                    elasticity: int = 1) -> JobModel:
    """``partitions`` must give every input, output and intermediate stream's count;
    ``elasticity`` is the number of virtual tasks per task."""
    broadcast = {sid for sid, s in plan.streams.items() if s.kind == "broadcast"}
    consumed = {sid for stage in plan.stages for sid in stage.inputs}
    width = max([partitions[sid] for sid in consumed if sid not in broadcast] or [1])
    x = elasticity
    tasks = [TaskModel(task_name(p, b, x), p * x + b, partition=p, bucket=b, buckets=x)
             for p in range(width) for b in range(x)]
    for stage in plan.stages:
        owners: set[int] = set()
        for sid in stage.inputs:
            if sid in broadcast:
                owners.update(range(width))
                for t in tasks:
                    t.ssps.append(SSP(sid, 0))
            else:
                for p in range(partitions[sid]):
                    owners.add(p)
                    for b in range(x):
                        tasks[p * x + b].ssps.append(SSP(sid, p))
        for p in sorted(owners):
            for b in range(x):
                tasks[p * x + b].stages.append(stage)
    for t in tasks:
        t.ssps = sorted(set(t.ssps))
    producers: dict[str, int] = {}
    for stage in plan.stages:
        count = sum(1 for t in tasks if stage in t.stages)
        for sid in stage.outputs:
            if sid in plan.intermediate_streams:
                producers[sid] = count
    return JobModel(plan, dict(partitions), [t for t in tasks if t.ssps], producers)


def container_tasks(job: JobModel, count: int, container_id: int) -> list[TaskModel]:
    """The tasks container ``container_id`` of ``count`` runs: the k-th task goes to container
    k mod ``count``, so every container gets its share whatever the partition counts."""
    if not 0 <= container_id < count:
        raise ValueError(f"container id {container_id} is not in [0, {count})")
    return [t for k, t in enumerate(job.tasks) if k % count == container_id]


def job_containers(job: JobModel, config: JobConfig) -> tuple[int | None, list[TaskModel]]:
    """This process's container id (None: the job runs in one container) and its tasks."""
    count = config.job.container_count
    cid = config.job.container_id
    if cid is None:
        if count > 1:
            raise ConfigError(
                f"job.container.count={count}: run the job with LocalRunner or `samza-dsl run`, "
                f"which start {count} container processes, or give each process its "
                f"job.container.id (`samza-dsl run APP --container-id i`, i in 0..{count - 1})")
        return None, list(job.tasks)
    if cid >= count:
        raise ConfigError(f"job.container.id={cid} is not below job.container.count={count}: "
                          f"container ids are 0..{count - 1}")
    return cid, container_tasks(job, count, cid)


def start_generation(stored: int, join: bool) -> int:
    """A run's generation: a new run takes the next one; a container that joins a run of
    several containers takes the current one (the first run's is 1)."""
    return max(stored, 1) if join else stored + 1
