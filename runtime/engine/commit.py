"""A task's commit, one unit (docs/semantics.md rule 16), as the task's run loop calls it.

The order, and why:

0. (the task, just before) operators write the state they hold in memory into their stores
   (``Operator.flush_state``: a tumbling window's pane values), so step 3 covers it;
1. take the task's checkpoint offsets first: a message that completes while the commit runs
   (``task.async.commit``) has outputs the flush below may not cover, so it must not be in them;
2. flush the producer: every output of a checkpointed message is durable;
3. flush the task's stores, which writes their changes into the changelogs' producer buffers,
   then flush the producer again: the changelogs are durable;
4. record each store's committed changelog position;
5. write the checkpoint (input offsets and changelog positions) in one write;
6. tell the state backend (the local system then compacts changelogs and trims streams below
   the new checkpoint).

A crash between any two steps leaves a checkpoint no further than what is durable, so the task
restarts from it and restores its stores to exactly that point.

A task with outputs written by sinks (``runtime.engine.sinks``, docs/connectors.md) also prepares them
right after step 2 (each sink's ``prepare``: durable, not yet visible), records their positions
and the checkpoint's id in the checkpoint of step 5, and commits them once it is written
(``commit``: visible). A crash before step 5 leaves the prepared writes out of every checkpoint
(the sinks' ``recover`` drops them, and the messages are processed again); a crash after it
leaves them in the checkpoint (``recover`` makes them visible). In the exactly-once commit below
they are prepared before step 3's transaction and committed after it. ``SAMZA_DSL_CRASH_AT`` can kill
the process at each step (``runtime.engine.faults``).

Under ``job.processing.guarantee=exactly-once`` (a system that gives the committer
``transactions``: the embedded local system) each task writes into buffers of its own, which
nothing reads, and its commit is:

1. take the task's checkpoint offsets (no message is in flight: async commits are refused);
2. flush the task's stores: into their local files, marked uncommitted, and their changelog
   entries into the task's buffers;
3. ONE write transaction of the log: the task's outputs, intermediate-stream records, changelog
   entries and dead letters, and its checkpoint holding the changelogs' positions after them;
4. record each store's committed changelog position (``state.committed``);
5. tell the state backend, as above.

Readers see the task's records at step 3 or never. A crash before it leaves the previous
checkpoint and no record of the messages after it; a store flushed at step 2 (or earlier, past
``write.batch.size``) is marked uncommitted, so the restart rebuilds it from its changelog up
to that checkpoint. A crash after it and before step 4 leaves the store uncommitted too: rebuilt
to the checkpoint, which now holds everything it did.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from runtime.engine import faults
from runtime.engine.job import SSP
from runtime.engine.systems import CheckpointStore, Producer, StateBackend

if TYPE_CHECKING:
    from runtime.engine.sinks import TaskSinks

__all__ = ["Committer", "Transactions", "warn_at_least_once"]


_eos_log = logging.getLogger("samza_dsl.exactly_once")


def warn_at_least_once(app: Any, job_name: str) -> None:
    """A job that runs exactly once says, once at start, which of its writes stay at least
    once: those to remote tables (and sink functions, and what functions do outside the job's
    streams)."""
    remote = sorted(t for t, spec in app.remote_tables.items()
                    if spec.write is not None or spec.write_all is not None)
    if remote:
        _eos_log.warning(
            "job %s runs exactly once (job.processing.guarantee=exactly-once), but its "
            "writes to remote table(s) %s stay at least once: a message processed again "
            "after a crash writes again (make the writes idempotent), as do sink functions "
            "and anything a function does outside the job's streams (docs/operations.md)",
            job_name, ", ".join(remote))


class Transactions(Protocol):
    """Exactly-once commits of a system: each task writes into buffers of its own, and ``commit``
    writes them with the task's checkpoint in one transaction."""

    def commit(self, task_name: str, offsets: Mapping[SSP, int]) -> Awaitable[None] | None:
        """One transaction (the local log's is synchronous; Kafka's is awaited)."""


class Committer:
    """Commits the tasks of one container over its producer, state backend and checkpoints."""

    def __init__(self, producer: Producer, state: StateBackend,
                 checkpoints: CheckpointStore) -> None:
        self.producer = producer
        self.state = state
        self.checkpoints = checkpoints
        #: commits done so far, and the nanoseconds they took
        self.commits = 0
        self.commit_ns = 0
        #: per task, the offsets its checkpoint holds and when it was written (seconds since
        #: the epoch; None: unknown), as ``samza-dsl status`` reads them back
        self.committed: dict[str, dict[SSP, int]] = {}
        self.written: dict[str, float | None] = {}
        #: when the last commit of this container ended (seconds since the epoch)
        self.last_commit: float | None = None
        #: exactly-once: commits are one transaction of the system (None: at least once)
        self.transactions: Transactions | None = None
        #: per task with outputs written by sinks, its sinks (``runtime.engine.sinks``)
        self.sinks: dict[str, TaskSinks] = {}

    def seed(self, task_name: str, offsets: Mapping[SSP, int]) -> None:
        """The checkpoint ``task_name`` resumes from, as if this container had written it."""
        self.committed[task_name] = dict(offsets)
        self.written[task_name] = self._written(task_name) if offsets else None

    def forget(self, task_name: str) -> None:
        """A task that left this container: its checkpoint is another's to report."""
        self.committed.pop(task_name, None)
        self.written.pop(task_name, None)

    def _written(self, task_name: str) -> float | None:
        return self.checkpoints.written(task_name)

    async def commit(self, task_name: str, offsets: Mapping[SSP, int], *,
                     has_stores: bool, times: Any = None,
                     applied: Mapping[str, Any] | None = None) -> float:
        """Commit ``offsets`` (taken by the caller before calling) for task ``task_name``, with
        its event-time progress as of them (``times``, where the checkpoint store keeps it), what
        it applied of its intermediate streams (``applied``, ``runtime.engine.origins``) and
        its sinks (``sinks``) prepared before the checkpoint and committed after it; returns
        when it ended (``time.monotonic()``)."""
        began = time.perf_counter_ns()
        sinks = self.sinks.get(task_name)
        offsets = dict(offsets)
        if times is not None:
            self.checkpoints.times[task_name] = times
        if applied is not None:  # what it applied of its intermediate streams, at least once
            self.checkpoints.applied[task_name] = applied
        crash = faults.reached if faults.ARMED else None
        if crash:
            crash("commit.start")
        if self.transactions is not None:
            await self._transaction(self.transactions, task_name, offsets, has_stores, crash,
                                    sinks)
        else:
            await self._steps(task_name, offsets, has_stores, crash, sinks)
        if sinks is not None:
            if crash:
                crash("commit.checkpointed")
            await sinks.commit()
            if crash:
                crash("commit.sinks-committed")
        self.state.checkpointed(task_name)  # e.g. compacts changelogs, trims streams below it
        if crash:
            crash("commit.done")
        self.committed.setdefault(task_name, {}).update(offsets)
        self.written[task_name] = self._written(task_name)
        self.last_commit = time.time()
        self.commits += 1
        self.commit_ns += time.perf_counter_ns() - began
        return time.monotonic()

    async def _prepare(self, task_name: str, sinks: TaskSinks | None,
                       crash: Callable[[str], None] | None,
                       offsets: Mapping[SSP, int]) -> None:
        """The task's sinks prepared for the checkpoint of ``offsets``, and what the
        checkpoint records of them set."""
        if sinks is None:
            return
        record = await sinks.prepare(offsets)
        self.checkpoints.sinks[task_name] = record
        if crash:
            crash("commit.sinks-prepared")

    async def _transaction(self, transactions: Transactions, task_name: str, offsets: dict[SSP, int],
                     has_stores: bool, crash: Callable[[str], None] | None,
                     sinks: TaskSinks | None = None) -> None:
        """An exactly-once commit (steps 2 to 4 of the second list above)."""
        if has_stores:
            self.state.flush(task_name)  # into the task's own buffers: nobody reads them yet
            if crash:
                crash("commit.stores-flushed")
        await self._prepare(task_name, sinks, crash, offsets)
        done = transactions.commit(task_name, offsets)
        if done is not None:
            await done
        if crash:
            crash("commit.transaction")
        if has_stores:
            self.state.committed(task_name)
            if crash:
                crash("commit.stores-committed")

    async def _steps(self, task_name: str, offsets: dict[SSP, int], has_stores: bool,
                     crash: Callable[[str], None] | None,
                     sinks: TaskSinks | None = None) -> None:
        """An at-least-once commit (steps 2 to 5 of the first list above)."""
        await self.producer.flush()
        if crash:
            crash("commit.outputs-flushed")
        await self._prepare(task_name, sinks, crash, offsets)
        changelogs: dict[str, int] = {}
        if has_stores:
            self.state.flush(task_name)  # changes into the changelogs' producer buffers
            await self.producer.flush()  # the changelogs are durable
            if crash:
                crash("commit.changelogged")
            changelogs = self.state.committed(task_name)
            if crash:
                crash("commit.stores-committed")
        written = self.checkpoints.write(task_name, offsets, changelogs)
        if written is not None:  # a checkpoint store that writes through a producer
            await written
