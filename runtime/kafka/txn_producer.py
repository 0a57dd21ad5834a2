"""A transactional Kafka producer: records to any number of topics and partitions, and consumer
offsets, become visible together at ``commit`` or never.

It is aiokafka's producer with one change: the requests of its transactions go out in the
versions of ``txn_protocol`` (flexible, which brokers that dropped version 0 accept) instead of
version 0. aiokafka's sender keeps its state machine and retries; only what its handlers build
and read is translated, at the one place every request passes, the sender's client. Produce and
metadata requests are untouched.

    producer = TransactionalProducer("127.0.0.1:9092", "job-1-Partition 0")
    await producer.start()                 # InitProducerId: fences older producers of the id
    await producer.begin()
    await producer.send("out", b"v", key=b"k", partition=0)
    await producer.send("checkpoints", b"...", key=b"task", partition=0)
    await producer.commit()                # both records, or (abort) neither

What a consumer sees depends on its isolation level: ``read_committed`` reads a transaction's
records once it commits and never if it aborts; ``read_uncommitted`` (aiokafka's default) reads
them at once.

Fencing: ``start`` bumps the producer epoch of the transactional id, which aborts the
transaction an older producer of that id has open and makes the broker refuse it from then on.
The older one's next commit, abort, send or offset commit raises
:class:`~samza_dsl.errors.ProducerFenced` naming the transactional id, and so does every call
after that.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka import errors as kafka_errors
from aiokafka.structs import OffsetAndMetadata, RecordMetadata

from runtime.kafka.admin import live_first
from runtime.kafka.aiokafka_compat import route_sender_requests, txn_manager, unsent_batch_waiters
from runtime.kafka.system import kafka_error, stop_client
from runtime.kafka.txn_protocol import TRANSACTION_REQUESTS, as_v0_response
from samza_dsl.errors import ProducerFenced, SamzaError, TransactionUnanswered

__all__ = ["FENCED_ERRORS", "TransactionalProducer"]

_log = logging.getLogger(__name__)

# what aiokafka raises where the broker said the epoch is old: a newer producer has the id
_FENCED = (kafka_errors.ProducerFenced, kafka_errors.InvalidProducerEpoch)
FENCED_ERRORS = _FENCED


async def _newer_transaction_requests(client: Any, node_id: int, request: Any,
                                      group: Any) -> Any:
    """A request of aiokafka's sender: the transaction requests its handlers build in version 0
    go out in ``txn_protocol``'s versions, and the answers come back in the shape of version 0.
    Every other request goes out as it is."""
    newer = TRANSACTION_REQUESTS.get(getattr(request, "API_KEY", -1))  # foreign: aiokafka's
    if newer is None or isinstance(request, newer):
        return await client.send(node_id, request, group=group)
    v0 = request.prepare({request.API_KEY: (0, 0)})
    response = await client.send(node_id, newer.from_v0(v0), group=group)
    return as_v0_response(response)


class TransactionalProducer:
    """A producer whose records and offsets commit atomically, under ``transactional_id``.

    ``settings`` go to aiokafka's producer (``acks`` is always ``all``, as transactions need).
    """

    def __init__(self, bootstrap_servers: str, transactional_id: str, *,
                 transaction_timeout_ms: int = 60_000, timeout: float = 30.0,
                 **settings: Any) -> None:
        if not transactional_id:
            raise SamzaError("a transactional producer needs a non-empty transactional id, "
                             "e.g. '<job>-<job.id>-<task>'")
        self.servers = bootstrap_servers
        self.transactional_id = transactional_id
        self.timeout = timeout
        self._settings = dict(settings, transactional_id=transactional_id,
                              transaction_timeout_ms=transaction_timeout_ms)
        self._producer: AIOKafkaProducer | None = None
        self._fenced: ProducerFenced | None = None
        self._open = False  # between begin() and the end of its commit or abort
        #: delivery futures of the open transaction's records, checked before it commits
        self._pending: list[tuple[str, int | None, asyncio.Future[RecordMetadata]]] = []

    async def start(self) -> None:
        """Connect and take the transactional id (InitProducerId), fencing older producers.

        A first InitProducerId that finds the id's last transaction still open makes the broker
        abort it, and that abort can fail while the broker's state settles (after a restart of
        the broker, Apache Kafka answered INVALID_PRODUCER_EPOCH): a new producer asked with no
        epoch of its own, so nothing newer holds the id, and asking again is safe. It asks again
        within ``timeout``, as Kafka Streams does by making a new producer."""
        deadline = time.monotonic() + self.timeout
        pause = 0.1
        while True:
            producer = AIOKafkaProducer(bootstrap_servers=live_first(self.servers),
                                        **self._settings)
            route_sender_requests(producer, _newer_transaction_requests)
            try:
                async with asyncio.timeout(max(deadline - time.monotonic(), 0.0)):
                    await producer.start()
            except _FENCED as exc:
                await stop_client(producer)
                if time.monotonic() + pause >= deadline:
                    raise SamzaError(
                        f"starting the transactional producer {self.transactional_id!r} on "
                        f"Kafka at {self.servers} failed: the broker answered "
                        f"{type(exc).__name__} to every InitProducerId for {self.timeout:g} s. "
                        f"Another producer of that id may be taking it over and over (a second "
                        f"instance of the job with the same job.name and job.id?); stop it, or "
                        f"look at the broker's log for its transaction coordinator") from exc
                _log.info("transactional id %r: InitProducerId answered %s while the broker "
                          "settles the transaction left open; asking again",
                          self.transactional_id, type(exc).__name__)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            except asyncio.CancelledError:  # its caller gave up: the producer closes
                await stop_client(producer, 1.0)
                raise
            except (kafka_errors.KafkaError, TimeoutError, OSError) as exc:
                await stop_client(producer)
                raise kafka_error(f"starting the transactional producer "
                                  f"{self.transactional_id!r}", self.servers, exc,
                                  self._settings) from exc
            self._producer = producer
            return

    @property
    def producer(self) -> AIOKafkaProducer | None:
        """aiokafka's producer underneath (None before ``start``): its batches
        (``create_batch``/``send_batch``) go into the open transaction."""
        return self._producer

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (``begin`` called, not committed or aborted yet)."""
        return self._open

    def failure(self) -> BaseException | None:
        """The error aiokafka's producer stopped on, if it did (e.g. fenced)."""
        producer = self._producer
        if producer is None or not _failed_for_good(producer):
            return None
        return _fatal_error(producer)

    def transaction_error(self) -> BaseException | None:
        """The error aiokafka's sender ended the open transaction with, if it did (a fenced
        AddPartitionsToTxn or Produce): aiokafka then refuses any send as "not in transaction",
        and this is what it means."""
        producer = self._producer
        txn = txn_manager(producer) if producer is not None else None
        waiter = txn.wait_for_transaction_end() if txn is not None else None
        if waiter is None or not waiter.done() or waiter.cancelled():
            return None
        return waiter.exception()

    def fence(self) -> ProducerFenced:
        """Note that a newer producer has the id: every call from now on raises it."""
        return self._fence()

    async def stop(self, timeout: float = 5.0) -> None:
        """Close, waiting at most ``timeout`` seconds for what it still sends; a transaction
        still open is aborted by the broker when it times out, or at once when a producer of
        the same id starts."""
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await stop_client(producer, timeout)
            _retrieve_failures(producer)

    async def begin(self) -> None:
        producer = self._ready(in_transaction=False)
        await self._fence_checked(producer.begin_transaction())
        self._pending.clear()
        self._open = True

    async def send(self, topic: str, value: bytes | None, *, key: bytes | None = None,
                   partition: int | None = None,
                   headers: list[tuple[str, bytes]] | None = None
                   ) -> asyncio.Future[RecordMetadata]:
        """Queue a record in the open transaction; the returned future resolves when the
        broker has it (it is visible to read_committed readers only after ``commit``)."""
        producer = self._ready(in_transaction=True)
        delivery = await self._fence_checked(
            producer.send(topic, value, key=key, partition=partition, headers=headers))
        # commit() reports a failed record; this keeps asyncio from reporting it again
        delivery.add_done_callback(_retrieved)
        self._pending.append((topic, partition, delivery))
        ack: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        delivery.add_done_callback(lambda done: self._relay(done, ack))
        return ack

    def _relay(self, delivery: asyncio.Future[RecordMetadata],
               ack: asyncio.Future[RecordMetadata]) -> None:
        """``delivery``'s outcome to the caller's ``ack``, with fencing as ProducerFenced."""
        if ack.done():
            return
        if delivery.cancelled():
            ack.cancel()
            return
        exc = delivery.exception()
        if exc is None:
            ack.set_result(delivery.result())
            return
        ack.set_exception(self._fence() if isinstance(exc, _FENCED) else exc)
        ack.add_done_callback(_retrieved)  # the caller may never await it: commit() reports

    async def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int],
                                          group_id: str) -> None:
        """Commit consumer offsets (the next offset to read of each partition) for
        ``group_id`` as part of the open transaction."""
        producer = self._ready(in_transaction=True)
        await self._fence_checked(producer.send_offsets_to_transaction(
            {tp: OffsetAndMetadata(offset, "") for tp, offset in offsets.items()}, group_id))

    async def commit(self, *, timeout: float | None = None) -> None:
        """Make the open transaction's records and offsets visible, all of them. A record the
        broker refused aborts the transaction instead, and raises naming its topic.
        ``timeout``: how long the EndTxn may go unanswered (the producer's timeout unless
        given) before ``TransactionUnanswered``."""
        producer = self._ready(in_transaction=True)
        await self._fence_checked(producer.flush(), "sending the records")
        failed = self._failed_send()
        if failed is not None:
            if not _failed_for_good(producer):
                try:
                    await self.abort()
                except ProducerFenced:
                    raise
                except SamzaError as abort_failed:  # the refused record is the news
                    raise failed from abort_failed
            raise failed
        await self._fence_checked(producer.commit_transaction(), "the commit", timeout)
        self._pending.clear()
        self._open = False

    async def abort(self) -> None:
        """Drop the open transaction: none of its records or offsets become visible to
        read_committed readers."""
        producer = self._ready(in_transaction=True)
        await self._fence_checked(producer.abort_transaction(), "the abort")
        self._pending.clear()
        self._open = False

    def _failed_send(self) -> SamzaError | ProducerFenced | None:
        for topic, partition, future in self._pending:
            if not future.done() or future.cancelled() or future.exception() is None:
                continue
            exc = future.exception()
            if isinstance(exc, _FENCED):
                return self._fence()
            where = f"topic {topic!r}" + ("" if partition is None else f" partition {partition}")
            return SamzaError(
                f"the broker refused a record of transaction {self.transactional_id!r} to "
                f"{where}: {type(exc).__name__}: {exc}; the transaction is aborted, so none of "
                f"its records become visible: check the topic exists and the broker is healthy, "
                f"then process the input again")
        return None

    def _ready(self, *, in_transaction: bool) -> AIOKafkaProducer:
        if self._fenced is not None:
            raise self._fenced
        if self._producer is None:
            raise SamzaError(f"the transactional producer {self.transactional_id!r} is not "
                             f"started: call start() first")
        if _failed_for_good(self._producer):
            cause = _fatal_error(self._producer)
            if isinstance(cause, _FENCED):  # its sender learnt it first
                raise self._fence() from cause
            raise SamzaError(f"the transactional producer {self.transactional_id!r} failed "
                             f"earlier ({type(cause).__name__}: {cause}) and can run no more "
                             f"transactions: stop it and start a new one (its open transaction "
                             f"is aborted when the new one starts)") from cause
        if self._open != in_transaction:
            raise SamzaError(
                f"a transaction of producer {self.transactional_id!r} is already open: commit "
                f"or abort it first" if self._open else
                f"no transaction of producer {self.transactional_id!r} is open: call begin() "
                f"first")
        return self._producer

    def _fence(self) -> ProducerFenced:
        self._fenced = ProducerFenced(self.transactional_id)
        return self._fenced

    async def _fence_checked(self, step: Any, what: str = "",
                             timeout: float | None = None) -> Any:
        wait = self.timeout if timeout is None else timeout
        try:
            if not what:
                return await step
            async with asyncio.timeout(wait):
                return await step
        except _FENCED as exc:
            raise self._fence() from exc
        except TimeoutError as exc:  # tansu drops a fenced producer's connection: this too
            raise TransactionUnanswered(
                f"{what} of transaction {self.transactional_id!r} did not finish within "
                f"{wait:g} s: the transaction coordinator on Kafka at {self.servers} "
                f"does not answer (a broker that drops the connection of a fenced producer "
                f"looks like this too); check the broker, and stop this instance if another "
                f"one has the same transactional id", self.transactional_id) from exc


def _failed_for_good(producer: AIOKafkaProducer) -> bool:
    """aiokafka's producer stopped sending after an error it cannot recover from (its sender
    died), and would assert on any further transaction step."""
    txn = txn_manager(producer)
    return txn is not None and bool(txn.is_fatal_error())


def _fatal_error(producer: AIOKafkaProducer) -> BaseException | None:
    txn = txn_manager(producer)
    waiter = txn.wait_for_transaction_end() if txn is not None else None
    if waiter is None or not waiter.done() or waiter.cancelled():
        return None
    return waiter.exception()


def _retrieve_failures(producer: AIOKafkaProducer) -> None:
    """aiokafka's sender, when it fails (fenced), leaves the failure in futures nobody awaits:
    the transaction's waiter and each unsent batch's drain waiter. This producer has reported
    it already; asyncio would report each again as "never retrieved" when it is collected."""
    txn = txn_manager(producer)
    futures = [txn.wait_for_transaction_end()] if txn is not None else []
    futures.extend(unsent_batch_waiters(producer))
    for future in futures:
        if future is not None and future.done():
            _retrieved(future)


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
