"""What a task gets from the container that runs it: a narrow environment, not the container.

The container builds one ``TaskEnv`` and hands it to each of its tasks. A task reads its config,
clock and metrics from it, runs blocking user code on its executor, writes through its producer,
opens its stores, commits through its committer (``runtime.engine.commit``), says when it has taken
records from its inbox, and sees ``stopping`` when the container is asked to stop. The
container's tasks share one rate limiter per remote table (``shared``).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from runtime.engine.commit import Committer
from runtime.engine.job import TaskModel
from runtime.engine.systems import Producer
from runtime.host.metrics import Metrics
from samza_dsl.jobconfig import JobConfig

__all__ = ["TaskEnv"]


@dataclass(eq=False)
class TaskEnv:
    config: JobConfig
    #: milliseconds since the epoch (``ctx.clock()``)
    clock: Callable[[], int]
    metrics: Metrics
    #: where blocking user code runs (``job.container.thread.pool.size``), or None: inline
    executor: Executor | None
    producer: Producer
    #: a task's store, restored to the task's checkpoint
    open_store: Callable[[TaskModel, str], Any]
    committer: Committer
    #: a task took records from its inbox (its partitions may be read again); takes the task
    on_consumed: Callable[..., None]
    #: the container was asked to stop: drain, commit, close
    stopping: bool = False
    #: the container's share of the job's tasks (a remote table's rate limit is split by it)
    task_share: float = 1.0
    #: what the container's tasks share: each remote table's token bucket
    shared: dict[str, Any] = field(default_factory=dict)
    #: ``clock`` in nanoseconds, where it reads one (``OperatorContext.clock_ns``)
    clock_ns: Callable[[], int] | None = None
    #: hand out batches of one fixed size instead of sizing them by how long messages take: a
    #: stage's watermark goes downstream after each batch, so a message behind its input's
    #: declared out-of-orderness is late or not by where the batches end; fixed, the same run
    #: gives the same outputs however loaded the machine is (``TestRunner``)
    steady_batches: bool = False
    #: exactly-once: the producer of a task's own (given the task), whose records its commit
    #: writes; None: every task writes through ``producer``
    task_producer: Callable[[Any], Producer] | None = None
    #: the job's tracing (``runtime.host.tracing``), or None: off
    tracing: Any = None
