"""Exactly once on Kafka (``job.processing.guarantee=exactly-once``): each task writes through a
transactional producer of its own, and its commit is one Kafka transaction.

- A task's producer (``TaskProducer``) has ``transactional.id = <job>-<job.id>-<task>``: when
  it starts (InitProducerId) the broker aborts the transaction an earlier instance of the task
  left open and fences that instance, whose next write or commit raises ``ProducerFenced``.
- What the task writes (outputs, intermediate-stream records, changelog entries, control
  records) is sent in the background after each processed batch, as at least once, but inside
  the task's open transaction: a ``read_committed`` reader sees none of it before the commit.
- A commit (``runtime.engine.commit``) sends what is left, writes the task's checkpoint (its input
  offsets and each store's changelog position after this transaction's entries) to the
  checkpoint topic in the same transaction, and ends it (EndTxn): all of it becomes visible to
  ``read_committed`` readers together, or, after a crash, none of it.
- The job's own readers (intermediate streams, changelog restore, the checkpoint topic,
  standby replicas) read with ``isolation_level=read_committed`` (``runtime.kafka.job``),
  which their consumers decide from the log's transaction markers (``runtime.kafka.resolved``).
- With ``job.coordinator=kafka`` (tasks dealt by the job's consumer group) a task's producer
  takes its transactional id when the task is assigned, before its checkpoint and stores are
  read (``open``), and closes when the task leaves, after its last commit (``release``). A
  member frozen past its session timeout is fenced twice over: by the broker (the new owner's
  InitProducerId aborts what it left open; its next write raises ``ProducerFenced``) and by
  its lease (``runtime.kafka.fence``: nothing of a task's producer goes out past it, the
  EndTxn included).

What stays at least once: dead letters (written by the container's producer as records are
read), remote-table writes, sink functions and anything a function does outside the job's
streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aiokafka.errors import IllegalOperation, KafkaError, UnknownError

from runtime.engine import faults
from runtime.engine.job import SSP
from runtime.engine.records import EndOfStream
from runtime.kafka.aiokafka_compat import txn_manager
from runtime.kafka.committed import client_settings, transaction_outcome
from runtime.kafka.fence import Lease
from runtime.kafka.system import (
    LOST_STOP_S,
    KafkaCheckpoints,
    KafkaProducer,
    read_checkpoint_topic,
)
from runtime.kafka.txn_producer import FENCED_ERRORS, TransactionalProducer
from samza_dsl.errors import ProducerFenced, SamzaError, TransactionUnanswered

__all__ = ["KafkaTransactions", "TaskProducer", "fence_earlier", "transactional_id"]

#: what a transactional Produce is refused with once a newer producer took the id: Apache Kafka
#: answers INVALID_PRODUCER_EPOCH or PRODUCER_FENCED, some brokers UNKNOWN_SERVER_ERROR (tansu).
#: Either way the transaction cannot commit: the task stops and starts again from its checkpoint.
#: But tansu answers UNKNOWN_SERVER_ERROR while it shuts down too: that one counts as fencing
#: only while the brokers are up and answering (``TaskProducer.diagnosed``).
_FENCED_PRODUCE = FENCED_ERRORS
#: how long a closing task producer waits for the abort of its open transaction (seconds)
_ABORT_S = 5.0
#: a container of a static job: how long a task's EndTxn may go unanswered before a new
#: producer of its transactional id settles the transaction (``TaskProducer.commit``), and how
#: many times in a row that is done before the job stops
END_S = 10.0
_SETTLE_ATTEMPTS = 3
#: how much of an open transaction (record batch bytes) a task keeps to send it again, should
#: it be aborted after an EndTxn without an answer: beyond this the job stops instead
KEEP_BYTES = 64 << 20

_log = logging.getLogger(__name__)


def _retrieve(done: asyncio.Future[Any]) -> None:
    if not done.cancelled():
        done.exception()


def transactional_id(job_name: str, task_name: str) -> str:
    """The transactional id of a task's producer: ``<job>-<job.id>-<task>`` (``job_name`` is
    ``<job>-<job.id>``)."""
    return f"{job_name}-{task_name}"


async def fence_earlier(servers: str, settings: Mapping[str, Any], job_name: str,
                        task_names: list[str], timeout: float) -> None:
    """Take the transactional ids of ``task_names`` once (InitProducerId) and let go: the
    transactions an earlier run of those tasks left open (it was killed) are aborted before this
    run reads its checkpoints. A read_committed reader stops at the first open transaction (some
    brokers hold it back for every record written after one began: tansu), so the checkpoint
    topic is read to its end only once nothing of the tasks is open."""
    producers = [TransactionalProducer(servers, transactional_id(job_name, name),
                                       timeout=timeout, **settings) for name in task_names]
    try:
        await started_all(p.start() for p in producers)
    finally:
        await asyncio.gather(*(p.stop() for p in producers), return_exceptions=True)


async def started_all(starts: Iterable[Awaitable[None]]) -> None:
    """Every producer started; else the first error, once the other starts have ended,
    cancelled (each closes its producer): one left starting as the caller gives up would leave
    its producer open, never stopped ("Unclosed AIOKafkaProducer" as it is collected)."""
    tasks = [asyncio.ensure_future(s) for s in starts]
    try:
        for done in asyncio.as_completed(tasks):
            await done
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class TaskProducer(KafkaProducer):
    """One task's producer under exactly-once: the container producer's streams, sent inside
    the task's open Kafka transaction (``begin`` at its first record after a commit)."""

    def __init__(self, shared: KafkaProducer, txn_id: str, task_name: str,
                 task: Any = None) -> None:
        """``task``: the task instance, once built (``KafkaTransactions.producer_for``)."""
        self._shared = shared
        super().__init__(shared.servers, shared.settings, shared.generation,
                         timeout=shared.timeout, watch=shared.watch)
        self.serve(shared)
        self.task = task
        self.task_name = task_name
        self.txn = self._transactional(txn_id)
        #: a task of a static job's container settles an EndTxn that got no answer itself
        #: (``commit``); a member of a consumer group leaves that to the group, whose next
        #: owner of the task settles it
        self.settles = False
        #: the open transaction's records, as sent (topic, partition, records), to send them
        #: again should the transaction be aborted after an unanswered EndTxn; None once it
        #: held more than ``KEEP_BYTES``
        self._kept: list[tuple[str, int, list[Any]]] | None = []
        self._kept_bytes = 0

    def _transactional(self, txn_id: str) -> TransactionalProducer:
        shared = self._shared
        return TransactionalProducer(shared.servers, txn_id, timeout=shared.timeout,
                                     **shared.settings)

    @property
    def lease(self) -> Lease | None:
        """A member of a consumer group: nothing goes out past the member's lease, the end of a
        transaction included (``runtime.kafka.fence``); the container's producer's, as it is
        now (it has none once the member left its group)."""
        return self._shared.lease

    @lease.setter
    def lease(self, value: Lease | None) -> None:
        """The container's producer's lease is the one."""

    def send(self, stream_id: str, partition: int, payload: Any) -> None:
        """A record of the task; an end of stream asks for a commit: its readers see it (and
        end) only once the transaction holding it commits."""
        super().send(stream_id, partition, payload)
        if type(payload) is EndOfStream and self.task is not None:
            self.task.commit_requested = True

    def start_soon(self) -> None:
        """Take the transactional id now (aborting what an earlier instance left open, which
        holds back ``read_committed`` readers of its partitions), not at the first record."""
        self._sending = asyncio.get_running_loop().create_task(self._background())

    async def start(self) -> None:
        """Take the transactional id (InitProducerId) and wait for it: an earlier owner of the
        task is fenced, and the transaction it left open aborted, once this returns."""
        if self._producer is None:
            await self._start()

    async def _start(self) -> Any:
        await self.txn.start()
        self._producer = self.txn.producer
        return self._producer

    async def _send_records(self, producer: Any, topic: str, partition: int,
                            records: list[Any]) -> None:
        if not self.txn.in_transaction:
            await self.txn.begin()
            self._kept, self._kept_bytes = [], 0
        sent = self.sent_bytes
        try:
            await super()._send_records(producer, topic, partition, records)
        except IllegalOperation as exc:
            # aiokafka's sender ended the transaction on an error (fenced, on Apache Kafka, as
            # an AddPartitionsToTxn answer): that error is what happened, not "not in a
            # transaction"
            raise await self.diagnosed(self.txn.transaction_error() or exc) from exc
        kept = self._kept
        if kept is not None:
            self._kept_bytes += self.sent_bytes - sent
            if self._kept_bytes <= KEEP_BYTES:
                kept.append((topic, partition, records))
            else:
                self._kept = None

    async def _background(self) -> None:
        # one pass: what the tasks buffer meanwhile waits for the commit's flush, and nothing
        # of a transaction is visible before its commit anyway
        try:
            await self._send_buffered()
        except ProducerFenced as exc:
            self._error = exc
        except (KafkaError, OSError) as exc:
            self._error = await self.diagnosed(exc)
        except Exception as exc:
            self._error = exc

    async def _flush(self) -> None:
        """The records sent and acknowledged; a fenced producer (which the broker may tell in
        an AddPartitionsToTxn answer while the records wait) raises ``ProducerFenced`` at once
        rather than when the flush times out."""
        flushing = asyncio.ensure_future(super()._flush())
        flushing.add_done_callback(_retrieve)  # a flush left behind by a task stopped meanwhile
        producer = self.txn.producer  # aiokafka's, its transaction's state
        manager = txn_manager(producer) if producer is not None else None
        ended = manager.wait_for_transaction_end() if manager is not None else None
        if ended is not None and not ended.done():
            await asyncio.wait({flushing, ended}, return_when=asyncio.FIRST_COMPLETED)
        if not flushing.done() and ended is not None and ended.done() \
                and not ended.cancelled() and ended.exception() is not None:
            flushing.cancel()
            with contextlib.suppress(BaseException):
                await flushing
            raise await self.diagnosed(ended.exception())
        try:
            await flushing
        except ProducerFenced:
            raise
        except (SamzaError, KafkaError, OSError) as exc:
            raise await self.diagnosed(exc) from exc

    async def diagnosed(self, exc: BaseException | None) -> BaseException:
        """What ``exc`` (or what caused it, or the producer's own fatal error) means:

        - ``ProducerFenced`` where the broker said a newer producer has the transactional id
          (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH);
        - an ``UnknownError`` (UNKNOWN_SERVER_ERROR) is fencing only where the brokers are up
          and answering (``BrokerWatch.answers``): tansu answers a fenced Produce so, and also
          every Produce while it shuts down. Where they do not answer, the job goes the way of
          an outage, as at least once: the watch's warnings, then its error once
          ``job.kafka.unavailable.timeout.ms`` has passed (or, where they answer again within
          it, ``TransactionUnanswered``: the next producer of the id settles the transaction);
        - else ``exc``."""
        causes = [exc, exc.__cause__ if exc is not None else None, self.txn.failure(),
                  self.txn.transaction_error()]
        if any(isinstance(c, _FENCED_PRODUCE) for c in causes):
            return self.txn.fence()
        unknown = next((c for c in causes if isinstance(c, UnknownError)), None)
        if unknown is not None:
            watch = self.watch
            if watch is None or await watch.answers():
                return self.txn.fence()
            error = await watch.verdict()
            if error is not None:
                return error
            return TransactionUnanswered(
                f"transaction {self.txn.transactional_id!r} of task {self.task_name!r} was "
                f"refused ({type(unknown).__name__}) while Kafka at {self.servers} did not "
                f"answer; it answers again: the task stops without a commit and starts again "
                f"from its checkpoint (the next producer of the id aborts the transaction)",
                self.txn.transactional_id)
        return exc if exc is not None else SamzaError(
            f"transaction {self.txn.transactional_id!r} failed")

    async def commit(self, offsets: Mapping[SSP, int], checkpoints: KafkaCheckpoints,
                     positions: Callable[[], Mapping[str, int]]) -> None:
        """Send what is left and the checkpoint, then end the transaction (EndTxn).
        ``positions``: the task's changelogs' ends, read once this transaction's entries are
        acknowledged (the checkpoint covers them)."""
        await self.flush()
        if not self.txn.in_transaction:  # nothing since the last commit: still the checkpoint
            await self.txn.begin()
            self._kept, self._kept_bytes = [], 0
        record, data = checkpoints.record(self.task_name, offsets, positions())
        self.buffer(checkpoints.stream_id, 0).append(record)
        await self.flush()
        if faults.ARMED:
            faults.reached("commit.sent")
        lease = self.lease
        if lease is not None and not lease.valid():  # a member dropped from its group
            await lease.wait()
        attempt = 1
        while True:
            try:
                await self.txn.commit(timeout=min(END_S, self.timeout) if self.settles else None)
                break
            except TransactionUnanswered as exc:
                if not self.settles or attempt >= _SETTLE_ATTEMPTS:
                    raise
                attempt += 1
                if await self._settle_unanswered(exc, checkpoints):
                    break
        self._kept, self._kept_bytes = [], 0
        checkpoints.remember(self.task_name, data)

    async def _settle_unanswered(self, unanswered: TransactionUnanswered,
                                 checkpoints: KafkaCheckpoints) -> bool:
        """The task's EndTxn got no answer: it was lost on its way, or its answer was. A new
        producer of the transactional id settles the transaction (the broker completes a commit
        it logged and aborts one it did not), and the transaction marker that follows the
        task's checkpoint record in the log says which. Committed: True. Aborted: the
        transaction's records are sent again in a new one, which the caller commits (False).

        Not when a newer run of the job started meanwhile (it took the id, so the EndTxn may
        have gone unanswered because this producer was fenced): ``ProducerFenced``. And not
        when the transaction held more than ``KEEP_BYTES``: the job stops, nothing of the
        aborted transaction is visible, and the next run goes on from the task's checkpoint."""
        txn_id = self.txn.transactional_id
        end = self.end_offsets.get((checkpoints.topic, 0))
        kept, self._kept = self._kept, None
        uncommitted = {k: v for k, v in checkpoints.settings.items() if k != "isolation_level"}
        newest = await read_checkpoint_topic(self.servers, checkpoints.topic, uncommitted,
                                             self.timeout)
        if newest.generation is not None and newest.generation > self.generation:
            _log.warning("task %s: run %d of the job started after this one (%d): its EndTxn "
                         "went unanswered because the newer run took transactional id %r",
                         self.task_name, newest.generation, self.generation, txn_id)
            raise self.txn.fence() from unanswered
        _log.warning("task %s: %s. A new producer of transactional id %r settles it",
                     self.task_name, unanswered, txn_id)
        await self.txn.stop()
        self.txn = self._transactional(txn_id)
        self._producer = None
        producer = await self._start()
        if end is None:  # no checkpoint record acknowledged: nothing to tell the outcome by
            raise unanswered
        outcome = None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.timeout):
                while True:
                    outcome = await transaction_outcome(self.servers, checkpoints.topic, 0,
                                                        end - 1, client_settings(self.settings))
                    if outcome is not None:
                        break
                    await asyncio.sleep(0.05)
        if outcome == "COMMIT":
            _log.warning("task %s: the transaction of its commit had committed; it goes on",
                         self.task_name)
            return True
        if outcome is None:
            raise SamzaError(
                f"task {self.task_name!r}: its transaction (transactional id {txn_id!r}) got no "
                f"answer to its EndTxn, and no COMMIT or ABORT marker followed its checkpoint "
                f"record ({checkpoints.topic!r} offset {end - 1}) within {self.timeout:g} s "
                f"after a new producer of the id started: check the brokers' transaction "
                f"coordinator, then run the job again (it goes on from the task's last "
                f"checkpoint)") from unanswered
        if kept is None:
            raise SamzaError(
                f"task {self.task_name!r}: its transaction (transactional id {txn_id!r}) was "
                f"aborted after its EndTxn got no answer, and it held more than "
                f"{KEEP_BYTES >> 20} MiB, too much to send again: nothing of it is visible; run "
                f"the job again to go on from the task's last checkpoint (a shorter "
                f"task.commit.ms keeps transactions smaller)") from unanswered
        _log.warning("task %s: the transaction of its commit was aborted; its %d record "
                     "batch(es) are sent again in a new one", self.task_name, len(kept))
        for topic, partition, records in kept:
            await self._send_records(producer, topic, partition, records)
        await self.flush()
        return False

    async def close(self) -> None:
        """Stop; an open transaction (the task failed before its commit) is aborted, so its
        partitions' ``read_committed`` readers go on at once. A send under way is stopped:
        what it holds was never committed (it may wait for a lease that a member which left
        its group never gets back)."""
        if self._sending is not None:
            self._sending.cancel()
            with contextlib.suppress(BaseException):
                await self._sending
        for ack, _ in self._acks:  # their failure was reported (or never will be): asyncio must
            ack.add_done_callback(_retrieve)  # not print it as "never retrieved" at exit
        # the job stopped because its brokers are gone: nothing reaches them, so neither the
        # abort nor the batches still queued are waited for (the transaction stays open until
        # the next producer of the id, or the broker's transaction timeout, aborts it)
        lost = self.brokers_lost
        with contextlib.suppress(Exception):
            if self.txn.in_transaction and not lost:
                # bounded: a fenced producer's EndTxn may go unanswered (tansu closes the
                # connection); the new owner's InitProducerId aborted it anyway
                async with asyncio.timeout(_ABORT_S):
                    await self.txn.abort()
        self._producer = None
        if lost:
            await self.txn.stop(LOST_STOP_S)
        else:
            await self.txn.stop()


class KafkaTransactions:
    """The exactly-once commits of a container's tasks on Kafka (``runtime.engine.commit.Transactions``):
    a transactional producer per task, and each commit as one transaction."""

    def __init__(self, shared: KafkaProducer, checkpoints: KafkaCheckpoints, job_name: str,
                 positions: Callable[[str], Mapping[str, int]], *, settles: bool = False) -> None:
        """``shared``: the container's producer (its streams, and where what the tasks wrote is
        counted); ``positions``: a task's stores' changelog positions now; ``settles``: the
        tasks settle an EndTxn that got no answer themselves (``TaskProducer.settles``: a
        static job's containers)."""
        self.shared = shared
        self.checkpoints = checkpoints
        self.job_name = job_name
        self.positions = positions
        self.settles = settles
        self._producers: dict[str, TaskProducer] = {}
        self._by_index: dict[int, TaskProducer] = {}
        #: producers of tasks that left the container, closing
        self._closing: set[asyncio.Task[None]] = set()
        shared.companions.append(self)

    async def open(self, tasks: list[Any]) -> None:
        """Tasks that come to this container (``job.coordinator=kafka``): their producers take
        their transactional ids before anything of theirs is read, so that the container that
        ran them before is fenced and the transactions it left open are aborted."""
        opened = []
        for m in tasks:
            old = self._producers.get(m.name)
            if old is not None:  # it left and came back: a new instance of the task
                self.release(m.name)
            producer = TaskProducer(self.shared, transactional_id(self.job_name, m.name), m.name)
            producer.settles = self.settles
            self._producers[m.name] = producer
            self._by_index[m.index] = producer
            opened.append(producer)
        await started_all(p.start() for p in opened)

    def producer_for(self, task: Any) -> TaskProducer:
        """The producer of a task of the container (``TaskEnv.task_producer``): the one ``open``
        started for it, else a new one taking its transactional id at once."""
        producer = self._producers.get(task.name)
        if producer is not None and producer.task is None:
            producer.task = task
            return producer
        producer = TaskProducer(self.shared, transactional_id(self.job_name, task.name),
                                task.name, task)
        producer.settles = self.settles
        self._producers[task.name] = producer
        self._by_index[task.index] = producer
        producer.start_soon()
        return producer

    def release(self, task_name: str) -> None:
        """A task left the container (it committed when revoked, or its container was
        fenced): its producer closes in the background, aborting a transaction still open."""
        producer = self._producers.pop(task_name, None)
        if producer is None:
            return
        for index, p in list(self._by_index.items()):
            if p is producer:
                del self._by_index[index]
        closing = asyncio.get_running_loop().create_task(producer.close())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    def of_index(self, index: int) -> TaskProducer:
        """The producer of the task of ``index``: its stores' changelog partition is
        ``index``, written in its transactions."""
        producer = self._by_index.get(index)
        if producer is None:
            raise SamzaError(
                f"changelog partition {index}: no task of index {index} runs in this container; "
                f"under exactly-once a changelog partition is written by its task's "
                f"transactions alone")
        return producer

    async def commit(self, task_name: str, offsets: Mapping[SSP, int]) -> None:
        """The task's transaction: its records and its checkpoint, visible together."""
        producer = self._producers[task_name]
        await producer.commit(offsets, self.checkpoints, lambda: self.positions(task_name))
        self._count(producer)

    def _count(self, producer: TaskProducer) -> None:
        """What the task wrote, counted as the container's producer's (metrics, the range of
        each output partition this run wrote)."""
        shared = self.shared
        shared.sends += producer.sends
        shared.sent_bytes += producer.sent_bytes
        shared.flush_ns += producer.flush_ns
        producer.sends = producer.sent_bytes = producer.flush_ns = 0
        for sid, n in producer.written.items():
            shared.written[sid] = shared.written.get(sid, 0) + n
        producer.written.clear()
        for key, end in producer.end_offsets.items():
            shared.end_offsets[key] = max(end, shared.end_offsets.get(key, end))
        for key, first in producer.first_offsets.items():
            shared.first_offsets[key] = min(first, shared.first_offsets.get(key, first))

    async def close(self) -> None:
        """Stop every task's producer (the container's producer closes after)."""
        producers, self._producers = list(self._producers.values()), {}
        self._by_index = {}
        await asyncio.gather(*(p.close() for p in producers), *self._closing,
                             return_exceptions=True)
