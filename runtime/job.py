"""The job model: which tasks exist, which stream partitions and stages each task owns.

As in Samza's default grouper, task ``Partition i`` owns partition ``i`` of every (non-broadcast)
input stream that has one, so a job has as many tasks as its widest input. Broadcast streams have
one partition, read by every task. A task runs the stages whose inputs it owns partitions of.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from planner import ExecutionPlan, Stage

__all__ = ["SSP", "TaskModel", "JobModel", "build_job_model"]


class SSP(NamedTuple):
    """A system stream partition (a tuple, so hashing it per message is cheap)."""

    stream_id: str
    partition: int

    def __str__(self) -> str:
        return f"{self.stream_id}[{self.partition}]"


@dataclass
class TaskModel:
    name: str
    index: int
    ssps: list[SSP] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)


@dataclass
class JobModel:
    plan: ExecutionPlan
    partitions: dict[str, int]
    tasks: list[TaskModel]
    #: intermediate stream id -> number of tasks producing into it (end-of-stream and watermark
    #: control messages are counted against it)
    producers: dict[str, int]

    def watermarked(self, stage: Stage) -> bool:
        """Whether a stage gets watermarks from upstream: an input declares ``event_time``, or an
        intermediate input is written by a stage that does."""
        app = self.plan.app
        for sid in stage.inputs:
            d = app.inputs.get(sid)
            if d is not None and d.event_time is not None:
                return True
            if sid in app.intermediates:
                producer = next(s for s in self.plan.stages if sid in s.outputs)
                if producer is not stage and self.watermarked(producer):
                    return True
        return False

    def task(self, name: str) -> TaskModel:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(name)


def build_job_model(plan: ExecutionPlan, partitions: Mapping[str, int]) -> JobModel:
    """``partitions`` must give every input, output and intermediate stream's count."""
    broadcast = {sid for sid, s in plan.streams.items() if s.kind == "broadcast"}
    consumed = {sid for stage in plan.stages for sid in stage.inputs}
    width = max([partitions[sid] for sid in consumed if sid not in broadcast] or [1])
    tasks = [TaskModel(f"Partition {i}", i) for i in range(width)]
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
                    tasks[p].ssps.append(SSP(sid, p))
        for i in sorted(owners):
            tasks[i].stages.append(stage)
    for t in tasks:
        t.ssps = sorted(set(t.ssps))
    producers: dict[str, int] = {}
    for stage in plan.stages:
        count = sum(1 for t in tasks if stage in t.stages)
        for sid in stage.outputs:
            if sid in plan.intermediate_streams:
                producers[sid] = count
    return JobModel(plan, dict(partitions), [t for t in tasks if t.ssps], producers)
