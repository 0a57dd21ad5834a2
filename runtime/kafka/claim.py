"""One process per container id of a Kafka job under ``job.coordinator=static``, on any host.

The ``job.dir`` flock refuses a second process for a container on one host only: two job dirs
(two hosts) do not see each other's locks. So each container with an id also claims its id in
the job's checkpoint topic, on the brokers every host shares, and keeps the claim alive:

- **Records.** ``__container__<id>/<instance>`` (one key per process, so that compaction keeps
  each one's last record): ``claim`` while it waits, then ``own``, renewed every heartbeat
  interval (``systems.<name>.consumer.heartbeat.interval.ms``, at most a quarter of the session
  timeout); a tombstone when it stops or is refused.
- **Claiming.** A process reads the topic, writes its ``claim`` and reads on to it (a fetch
  may bring records written after it too). The processes whose last record is not a tombstone
  may still run the container, except one whose records all came after that claim and are
  ``claim`` (it started later and waits for this one), one on this host whose PID is gone, and
  one whose ``job.dir`` this process now holds. A renewal of a running process read in the same
  fetch as the claim keeps that process among them: it runs.
  Where there is none, the id is its own at once. Else it waits a session timeout
  (``systems.<name>.consumer.session.timeout.ms``), renewing its claim: a record of any of them
  meanwhile means it runs, and this process is refused with an error naming its host, PID and
  job.dir; none means they are gone, and the id is its own. Of two processes that start at once,
  the later claim waits and is refused.
- **Losing it.** The owner reads the records of its id as it renews. An ``own`` of a process
  that claimed after it means it could not renew for a session timeout (frozen, or cut off
  from the brokers) and that process took the container: it fails with an error saying so (the
  new owner pays no heed to the renewals the old one writes before it reads that).
  What it wrote between coming back and reading that record is written twice; the group
  coordinator (``job.coordinator=kafka``) fences that window, this claim does not.

The claim runs on a thread of its own, so that a task that holds the event loop does not hold
back the renewals. Once the job's broker watch has declared its brokers lost, ``stop(lost=True)``
gives up at once: the thread's request under way is cancelled, no tombstone is written (a next
process from another job.dir waits a session timeout instead) and its clients close without
waiting on the brokers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from runtime.kafka.admin import live_first
from runtime.kafka.security import security_settings
from runtime.kafka.system import (
    CONTAINER_KEY,
    LOST_STOP_S,
    kafka_error,
    new_consumer,
    seek_to_starts,
    stop_client,
)
from samza_dsl.errors import SamzaError

__all__ = ["ContainerClaim", "ContainerTaken"]

_log = logging.getLogger("samza_dsl.claim")


class ContainerTaken(SamzaError):
    """Another process runs this container id."""


@dataclass
class _Seen:
    """The last record of one process for this container id."""

    offset: int
    state: str  # claim, own, or gone (a tombstone)
    host: str = ""
    pid: int = 0
    job_dir: str = ""
    #: the offset of its first record: where its claim began
    first: int = -1


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's)
        return False
    return False


class ContainerClaim:
    """This process's claim on its container id (module docstring). ``start`` returns once the
    id is this process's or raises ``ContainerTaken``; ``stop`` gives it up."""

    def __init__(self, servers: str, topic: str, settings: Mapping[str, Any], *,
                 job_name: str, container: str, job_dir: str, timeout: float = 10.0) -> None:
        self.servers = servers
        self.tp = TopicPartition(topic, 0)
        self.settings = dict(settings)
        self.job_name = job_name
        self.container = container
        self.job_dir = os.path.abspath(job_dir)
        self.timeout = timeout
        self.session_s = int(self.settings.get("session_timeout_ms", 10_000)) / 1000.0
        self.interval_s = min(int(self.settings.get("heartbeat_interval_ms", 3_000)) / 1000.0,
                              self.session_s / 4)
        self.instance = uuid.uuid4().hex[:12]
        self.host = socket.gethostname()
        self.prefix = CONTAINER_KEY + f"{container}/".encode()
        self.key = self.prefix + self.instance.encode()
        #: called (on the claim's thread) when another process took the container over
        self.on_lost: Callable[[SamzaError], None] | None = None
        self._seen: dict[str, _Seen] = {}
        self._mine = -1  # the offset of this process's claim
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        #: the brokers are lost (``stop(lost=True)``): nothing more is asked of them
        self._lost = False
        #: the claim's loop and its main task, while it runs (``stop`` cancels it when lost)
        self._running: tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None = None

    # -- the caller's side -------------------------------------------------------------------

    def start(self) -> None:
        """Claim the id (blocking: at most a session timeout and a few requests)."""
        self._thread = threading.Thread(target=self._serve, daemon=True,
                                        name=f"claim-{self.container}")
        self._thread.start()
        if not self._ready.wait(self.session_s + 4 * self.timeout):
            self.stop()
            raise SamzaError(f"job {self.job_name!r}: container {self.container}: claiming its "
                             f"id in the checkpoint topic {self.tp.topic!r} on Kafka at "
                             f"{self.servers} took too long; check the brokers and start it "
                             f"again")
        if self._error is not None:
            self.stop()
            raise self._error

    def stop(self, lost: bool = False) -> None:
        """Give the id up (a tombstone): the next process to claim it need not wait. ``lost``:
        the brokers are lost (the job's broker watch gave up on them); the thread stops what it
        asked them and closes its clients at once, without a tombstone."""
        if lost:
            self._lost = True
            running = self._running
            if running is not None:
                with contextlib.suppress(RuntimeError):  # its loop has closed meanwhile
                    running[0].call_soon_threadsafe(running[1].cancel)
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            # each client's close: LOST_STOP_S, then a second for its cancelled stop
            thread.join(2 * (LOST_STOP_S + 1.0) if lost else self.timeout + 5.0)

    # -- the claim's thread ------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # told to start(), or the owner learns it
            if not self._ready.is_set():
                self._error = exc
                self._ready.set()
            elif isinstance(exc, SamzaError) and self.on_lost is not None:
                self.on_lost(exc)

    async def _main(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._running = (asyncio.get_running_loop(), task)
        if self._lost:  # stopped as the thread began
            return
        producer = AIOKafkaProducer(bootstrap_servers=live_first(self.servers),
                                    request_timeout_ms=int(self.timeout * 1000),
                                    **security_settings(self.settings))
        consumer = new_consumer(self.servers, self.settings, brief=True)
        try:
            try:
                async with asyncio.timeout(self.timeout):
                    await producer.start()
                    await consumer.start()
                    consumer.assign([self.tp])
                    await seek_to_starts(self.servers, self.settings, consumer, [self.tp])
                    end = (await consumer.end_offsets([self.tp]))[self.tp]
            except (KafkaError, TimeoutError, OSError) as exc:
                raise kafka_error("claiming the container's id", self.servers, exc,
                                  self.settings) from exc
            await self._read(consumer, until=end)
            try:
                await self._own(producer, consumer)
                self._ready.set()
                await self._renew(producer, consumer)
            finally:
                # nothing more is read: the consumer stops before the tombstone is written,
                # so a slow write (a busy broker) cannot leave it open as the process exits
                await stop_client(consumer, LOST_STOP_S if self._lost else 5.0)
                if not self._lost:
                    with contextlib.suppress(KafkaError, OSError, TimeoutError):
                        async with asyncio.timeout(self.timeout):
                            await producer.send_and_wait(self.tp.topic, None, key=self.key,
                                                         partition=0)
        finally:
            self._running = None
            wait = LOST_STOP_S if self._lost else 5.0
            await stop_client(producer, wait)
            await stop_client(consumer, wait)

    async def _write(self, producer: AIOKafkaProducer, state: str) -> int:
        value = json.dumps({"state": state, "host": self.host, "pid": os.getpid(),
                            "job_dir": self.job_dir}).encode()
        try:
            async with asyncio.timeout(self.timeout):
                meta = await producer.send_and_wait(self.tp.topic, value, key=self.key,
                                                    partition=0)
        except (KafkaError, TimeoutError, OSError) as exc:
            raise kafka_error("renewing the container's claim", self.servers, exc,
                                  self.settings) from exc
        return int(meta.offset)

    async def _read(self, consumer: Any, *, until: int = -1, wait_ms: int = 0) -> None:
        """The records of this id, up to offset ``until`` (or what a fetch of ``wait_ms``
        brings)."""
        while True:
            try:
                batch = await consumer.getmany(self.tp, timeout_ms=max(wait_ms, 100))
            except KafkaError as exc:
                raise kafka_error("reading the container claims", self.servers, exc,
                                  self.settings) from exc
            for r in batch.get(self.tp, []):
                if r.key is not None and r.key.startswith(self.prefix):
                    self._note(r.key[len(self.prefix):].decode(), r.offset, r.value)
            if await consumer.position(self.tp) >= until:
                return

    def _note(self, instance: str, offset: int, value: bytes | None) -> None:
        before = self._seen.get(instance)
        first = offset if before is None else before.first
        if value is None:
            self._seen[instance] = _Seen(offset, "gone", first=first)
            return
        info = json.loads(value)
        self._seen[instance] = _Seen(offset, str(info.get("state")), str(info.get("host")),
                                     int(info.get("pid", 0)), str(info.get("job_dir")), first)

    def _maybe_running(self) -> dict[str, _Seen]:
        """The other processes that may run this container as of this process's claim."""
        out = {}
        for instance, s in self._seen.items():
            if instance == self.instance or s.state == "gone":
                continue
            if s.first > self._mine and s.state == "claim":
                continue  # it claimed after this one: it waits for this one, not this for it
            # a record of it after this claim (a renewal read in the same fetch as the claim)
            # says it runs: it is one of them, not one that came later
            if s.host == self.host and (s.job_dir == self.job_dir or _pid_gone(s.pid)):
                continue  # this process holds that job.dir's lock now, or that PID is gone
            out[instance] = s
        return out

    async def _own(self, producer: AIOKafkaProducer, consumer: Any) -> None:
        """Claim the id; wait a session timeout for the processes that may run it."""
        self._mine = await self._write(producer, "claim")
        await self._read(consumer, until=self._mine + 1)
        others = self._maybe_running()
        deadline = time.monotonic() + self.session_s
        while others and time.monotonic() < deadline:
            await asyncio.sleep(min(self.interval_s, max(0.0, deadline - time.monotonic())))
            # every record written so far, however slow a fetch is (one fetch of 100 ms can
            # come back empty on a busy broker, and a renewal would go unseen)
            until = await self._write(producer, "claim") + 1
            await self._read(consumer, until=until, wait_ms=100)
            alive = [s for i, s in others.items() if self._seen[i].offset > self._mine]
            if alive:
                s = alive[0]
                raise ContainerTaken(
                    f"job {self.job_name!r}: container {self.container} already runs on host "
                    f"{s.host} (pid {s.pid}, job.dir {s.job_dir}): a container id is one "
                    f"process at a time, on all hosts; stop that one first, or give this one "
                    f"another --container-id")
        await self._write(producer, "own")

    async def _renew(self, producer: AIOKafkaProducer, consumer: Any) -> None:
        """Renew the claim until stopped; fail once another process took the id over. A renewal
        the brokers do not take is tried again (the job rides out their outages)."""
        while True:
            until = time.monotonic() + self.interval_s
            while time.monotonic() < until:
                if self._stop.is_set():
                    return
                await asyncio.sleep(min(0.05, self.interval_s))
            try:
                await self._write(producer, "own")
                await self._read(consumer, until=0, wait_ms=50)
            except SamzaError as exc:
                _log.info("container %s: %s", self.container, exc)
                continue
            # one that claimed after this one and owns it now (this one's renewals went
            # unseen for a session timeout); an older one's renewals, written as it comes back
            # before it reads this one's claim, are not
            taken = [s for i, s in self._seen.items()
                     if i != self.instance and s.state == "own" and s.first > self._mine]
            if taken:
                s = taken[0]
                raise ContainerTaken(
                    f"job {self.job_name!r}: container {self.container}: another process took "
                    f"it over on host {s.host} (pid {s.pid}, job.dir {s.job_dir}) while this "
                    f"one could not renew its claim for a session timeout "
                    f"({self.session_s:g} s); this one stops")
