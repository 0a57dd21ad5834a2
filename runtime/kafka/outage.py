"""Kafka brokers that go away while a job runs (docs/operations.md, "Kafka outages").

A ``BrokerWatch`` sends the brokers a metadata request every second or so, whether the job is busy
or idle. While they do not answer, the job keeps retrying (aiokafka's consumer and producer retry
by themselves; the consumer's partitions are paused), a warning every ``WARN_EVERY`` seconds says
for how long, and once ``job.kafka.unavailable.timeout.ms`` has passed the job fails with one
error. When they answer again, the job's topics and checkpoints are checked (``on_back``) before
it reads on: a broker that lost the job's topics or records is an error, never a silent
reprocessing.

One broker lost of a replicated cluster is no outage: the others answer (the watch and the
job's admin requests ask the brokers that are up, ``runtime.kafka.admin.any_broker``), and the
partitions it led get new leaders once the controllers have fenced it
(``broker.session.timeout.ms``). While each of the job's partitions it led keeps
``min.insync.replicas`` in-sync replicas on brokers that are up, the job waits for those
partitions only, a warning says so, and the wait is not counted against
``job.kafka.unavailable.timeout.ms``; a partition that cannot get such a leader (too few
brokers up, a topic of one replica) is counted, as brokers that do not answer are.

While a watch runs, aiokafka's own log messages (a connection refused, a heartbeat that failed)
are not shown: the watch's warnings and its one error say what they mean. They are counted, as
a sign that a connection was lost for less than a probe's interval, which checks the job's
topics again. ``SAMZA_DSL_AIOKAFKA_LOG=<level>`` (``warning``, ``info``, ``debug``) shows those
of that level and above, each once until the job's topics have been checked again; an
exception aiokafka logs with its message is shown as its reason on the same line, and as a
traceback at ``debug`` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from aiokafka import AIOKafkaClient, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from runtime.kafka.admin import LostLeader, any_broker, live_first, lost_leaders, taking_connections
from runtime.kafka.aiokafka_compat import MetadataRequest, held_connections
from samza_dsl.errors import SamzaError

__all__ = ["BrokerWatch", "KafkaDataLost", "KafkaUnavailable", "lost_data_error",
           "lost_checkpoints_error", "missing_topics_error", "quiet_aiokafka"]

log = logging.getLogger("samza_dsl.kafka")

WARN_EVERY = 5.0  # seconds between the warnings while the brokers are away
KEY = "job.kafka.unavailable.timeout.ms"
T = TypeVar("T")


class KafkaUnavailable(SamzaError):
    """The brokers did not answer for longer than ``job.kafka.unavailable.timeout.ms``."""


class KafkaDataLost(SamzaError):
    """The brokers lack topics or records the job has checkpointed."""


def _asked_level(env: str = "SAMZA_DSL_AIOKAFKA_LOG") -> int:
    """The level from which aiokafka's log messages are shown (none unless asked for)."""
    name = os.environ.get(env, "").strip().upper()
    level = logging.getLevelName(name) if name else None
    return level if isinstance(level, int) else logging.CRITICAL + 1


class _Once(logging.Filter):
    """Lets each message of aiokafka's of the level asked for through once until ``reset``."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, Any]] = set()
        self.users = 0
        #: how many warnings aiokafka logged (a lost connection, a failed fetch or send...)
        self.alarms = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            self.alarms += 1
        if record.levelno < _asked_level():
            return False
        key = (record.name, str(record.msg))
        if key in self.seen:
            return False
        self.seen.add(key)
        if record.exc_info and _asked_level() > logging.DEBUG:
            _one_line(record)
        return True


def _one_line(record: logging.LogRecord) -> None:
    """``record`` with its exception's reason (and the reason it was raised from) at the end of
    its one line, instead of a traceback: a traceback is shown at ``debug`` only."""
    exc = record.exc_info[1] if record.exc_info else None
    reasons: list[str] = []
    while exc is not None and len(reasons) < 3:
        reasons.append(_reason(exc))
        exc = exc.__cause__ or exc.__context__
    record.msg = f"{record.getMessage()}: {' (from '.join(reasons)}{')' * (len(reasons) - 1)}"
    record.args = None
    record.exc_info = None
    record.exc_text = None


_ONCE = _Once()


def _aiokafka_loggers() -> list[logging.Logger]:
    names = [n for n in list(logging.Logger.manager.loggerDict)
             if n == "aiokafka" or n.startswith("aiokafka.")]
    return [logging.getLogger(n) for n in names]


@contextlib.contextmanager
def quiet_aiokafka() -> Any:
    """Each of aiokafka's log messages once while inside (a logger's filter applies to its own
    messages only, so it goes on every aiokafka logger)."""
    _ONCE.users += 1
    if _ONCE.users == 1:
        for logger in _aiokafka_loggers():
            logger.addFilter(_ONCE)
    try:
        yield
    finally:
        _ONCE.users -= 1
        if _ONCE.users == 0:
            for logger in _aiokafka_loggers():
                logger.removeFilter(_ONCE)
            _ONCE.seen.clear()


def _reason(exc: BaseException) -> str:
    text = str(exc).rstrip(".")
    name = type(exc).__name__
    return text if text.startswith(name) else f"{name}: {text}" if text else name


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 60 else f"{s / 60:.1f} min"


async def close_connections(client: Any) -> None:
    """Close what connections an aiokafka client still holds once stopped. Its ``stop()``
    closes those it holds as it begins; one that a request of ours was opening meanwhile (an
    offsets lookup, a metadata update) is stored after, and would be left open ("Unclosed
    AIOKafkaConnection" when it is collected). Give such a connect a moment to end, then close
    whatever is there."""
    conns = held_connections(client)  # a consumer's or admin's client, or the client itself
    if conns is None:
        return
    await asyncio.sleep(0.05)
    for conn in list(conns.values()):
        with contextlib.suppress(Exception):
            conn.close()
    conns.clear()


async def _bootstrapped(client: Any) -> None:
    """``client.bootstrap()``, closed again if it fails or the caller is cancelled. A bootstrap
    cut off while its metadata request is out leaves that connection open (aiokafka closes it
    only when the request fails), so a cancelled caller lets it end first: within the client's
    request timeout."""
    boot = asyncio.ensure_future(client.bootstrap())
    try:
        await asyncio.shield(boot)
    except BaseException:
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(10.0):
                await asyncio.shield(boot)
        with contextlib.suppress(Exception):
            await client.close()
        await close_connections(client)
        raise


class BrokerWatch:
    """Whether the brokers at ``servers`` answer; ``timeout`` seconds of silence fail the job."""

    def __init__(self, servers: str, timeout: float, *, interval: float | None = None,
                 settings: Mapping[str, Any] | None = None) -> None:
        self.servers = servers
        self.timeout = timeout
        self.interval = interval or min(1.0, max(0.05, timeout / 6))
        accepted = inspect.signature(AIOKafkaClient.__init__).parameters
        self.settings = {k: v for k, v in (settings or {}).items()  # security settings...
                         if k in accepted and k not in ("bootstrap_servers", "request_timeout_ms")}
        admin = inspect.signature(AIOKafkaAdminClient.__init__).parameters
        self._admin_settings = {k: v for k, v in self.settings.items() if k in admin}
        #: the job's topics: a partition of theirs a lost broker led is waited for while the
        #: brokers that are up can elect it a new leader (``lost_leaders``)
        self.topics: list[str] = []
        self._last_election_warning = -math.inf
        self.down_since: float | None = None  # None: the brokers answer (and were checked)
        self.reason = ""
        self.error: SamzaError | None = None
        #: the job's part: fail its tasks with the error (the watch runs beside them)
        self.on_fatal: Callable[[SamzaError], None] | None = None
        #: checks the job's topics once the brokers answer again (given how long they were
        #: away, 0 after aiokafka's warnings): raises KafkaDataLost if they lost data; any
        #: other error is taken for the brokers being away again
        self.on_back: Callable[[float], Awaitable[None]] | None = None
        self._last_warning = -math.inf
        self._alarms = 0  # aiokafka's warnings as of the last check of the job's topics
        self._last_check = -math.inf
        self._client: AIOKafkaClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._quiet: Any = None
        #: brokers in the cluster's metadata: the most seen, and as of the last probe
        self.brokers_seen = 0
        self.brokers_now = 0

    @property
    def healthy(self) -> bool:
        return self.down_since is None and self.error is None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._quiet = quiet_aiokafka()
            self._quiet.__enter__()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="kafka-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await client.close()
            await close_connections(client)  # also when the close ran out of time
        if self._quiet is not None:
            quiet, self._quiet = self._quiet, None
            quiet.__exit__(None, None, None)

    async def _run(self) -> None:
        self._alarms = _ONCE.alarms
        while self.error is None:
            alarms = _ONCE.alarms
            reason = await self._probe()
            if reason is not None:
                await self._reachable()
                self.unavailable(reason)
            elif self.down_since is not None:
                await self._back(alarms)
            elif alarms != self._alarms and time.monotonic() - self._last_check >= WARN_EVERY:
                # aiokafka lost a connection, or a fetch or send failed: the brokers may have
                # been away for less than a probe's interval, long enough to lose data
                await self._back(alarms)
            await asyncio.sleep(self.interval)

    async def _probe(self) -> str | None:
        """None if the brokers answer a metadata request, else why not."""
        try:
            async with asyncio.timeout(max(2.0, self.interval * 2)):
                if self._client is None:
                    client = AIOKafkaClient(
                        bootstrap_servers=live_first(self.servers),
                        request_timeout_ms=5000, **self.settings)
                    await _bootstrapped(client)
                    self._client = client
                    self._count(len(client.cluster.brokers()))
                else:
                    self._count(await self._ask(self._client))
        except (KafkaError, OSError, TimeoutError) as exc:
            return _reason(exc)
        return None

    def _count(self, brokers: int) -> None:
        self.brokers_now = brokers
        self.brokers_seen = max(self.brokers_seen, brokers)

    async def _reachable(self) -> None:
        """How many of the brokers the metadata listed take a connection now (a cluster that
        lost its controllers' quorum still lists the brokers it lost)."""
        client = self._client
        brokers = list(client.cluster.brokers()) if client is not None else []
        if not brokers:
            return
        addresses = [f"{b.host}:{b.port}" for b in brokers]
        up = await taking_connections(addresses)
        self.brokers_seen = max(self.brokers_seen, len(brokers))
        self.brokers_now = sum(1 for a in addresses if a in up)

    def _short(self) -> str:
        """What the brokers missing from the cluster mean, where some are (else "")."""
        if not 0 < self.brokers_now < self.brokers_seen:
            return ""
        return (f"only {self.brokers_now} of its {self.brokers_seen} brokers are up: a "
                f"partition with fewer in-sync replicas than its min.insync.replicas refuses "
                f"writes, and one led by a missing broker waits for a new leader; ")

    @staticmethod
    async def _ask(client: AIOKafkaClient) -> int:
        """A metadata request for no topics to a broker that answers (``any_broker``: the one
        that answered last first): the cheapest request every broker answers (all topics'
        metadata may be large); how many brokers the answer lists."""
        try:
            answer = await any_broker(client, MetadataRequest([], allow_auto_topic_creation=False))
            return len(answer.brokers)
        except KafkaError as exc:
            error: Exception = exc
        for broker in client.cluster.brokers():
            try:  # aiokafka says "not ready": why, as far as a connection tells
                _, writer = await asyncio.open_connection(broker.host, broker.port)
                writer.close()
            except OSError as exc:
                why = os.strerror(exc.errno) if exc.errno else str(exc)
                error = OSError(f"cannot connect to {broker.host}:{broker.port}: {why}")
        raise error

    async def _back(self, alarms: int) -> None:
        """Check the job's topics (``on_back``), as of ``alarms`` warnings of aiokafka's; while
        partitions of theirs wait for new leaders the brokers that are up can elect, not yet
        (``_elections``)."""
        now = self._last_check = time.monotonic()
        down_for = 0.0 if self.down_since is None else now - self.down_since
        lost = await self._elections()
        if lost:
            stuck = [p for p in lost if not p.electable]
            if stuck:  # none of the brokers that are up can lead them and take writes
                self.unavailable(_leaderless(stuck))
            else:
                self._electing(lost, down_for)
            return
        try:
            if self.on_back is not None:
                async with asyncio.timeout(max(self.timeout, 10.0)):
                    await self.on_back(down_for)
        except KafkaDataLost as exc:
            self.fail(exc)
            return
        except (SamzaError, KafkaError, OSError, TimeoutError) as exc:  # gone again
            await self._reachable()
            self.unavailable(_reason(exc))
            return
        if self.down_since is not None:  # what was checked, if anything
            checked = "" if self.on_back is None else \
                "the job's topics and checkpoints are intact, "
            log.warning("Kafka at %s answers again after %s; %sthe job goes on", self.servers,
                        _seconds(down_for), checked)
        self._alarms = alarms
        self.answered()
        _ONCE.seen.clear()

    async def _elections(self) -> list[LostLeader]:
        """The job's partitions whose leader does not take connections, where a broker of the
        cluster is lost (none else, and none where they cannot be read: the check of the job's
        topics says then what is wrong)."""
        if not self.topics:
            return []
        await self._reachable()
        if self.brokers_now >= self.brokers_seen:
            return []
        try:
            return await lost_leaders(self.servers, self.topics, timeout=5.0,
                                      **self._admin_settings)
        except SamzaError:
            return []

    def _electing(self, lost: list[LostLeader], down_for: float) -> None:
        """The brokers that are up answer and can elect new leaders for the job's partitions in
        ``lost``: the job goes on (those partitions wait), and the clock does not run; the
        job's topics are checked again in a while."""
        if self.down_since is not None:
            log.warning("Kafka at %s answers again after %s", self.servers, _seconds(down_for))
        self.answered()
        now = time.monotonic()
        if now - self._last_election_warning < WARN_EVERY:
            return
        self._last_election_warning = now
        nodes = ", ".join(str(n) for n in sorted({p.leader for p in lost}))
        log.warning(
            "Kafka at %s: broker %s does not take connections; it led %s, which the brokers "
            "that are up give new leaders once the controllers have fenced it "
            "(broker.session.timeout.ms). Until then they wait, and so do writes to partitions "
            "that count it in sync; the job goes on after (the wait does not count against %s)",
            self.servers, nodes, _partitions(lost), KEY)

    # -- what the job reports ----------------------------------------------------------------------

    def unavailable(self, reason: str) -> None:
        """The brokers did not answer: a warning every ``WARN_EVERY`` seconds, the job's error
        once the timeout has passed."""
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = now
        self.reason = reason
        down = now - self.down_since
        limit = f"{KEY}={self.timeout * 1000:.0f}"
        if down >= self.timeout:
            self.fail(KafkaUnavailable(
                f"Kafka at {self.servers} has not answered for {_seconds(down)}, longer than "
                f"{limit} ({self._short()}last error: {reason}); the job stopped. What it "
                f"committed is safe: "
                f"start it again once the broker is back and it goes on from its checkpoints. "
                f"To ride out longer outages, raise {KEY}"))
        elif now - self._last_warning >= WARN_EVERY:
            self._last_warning = now
            short = self._short()
            if short:
                log.warning("Kafka at %s: %sthe job's writes wait, for %s so far (%s); the job "
                            "retries for up to %s (%s)", self.servers, short, _seconds(down),
                            reason, _seconds(self.timeout), limit)
                return
            gone = "does not answer" if down < 1 else f"has not answered for {_seconds(down)}"
            log.warning("Kafka at %s %s (%s); the job retries for up to %s (%s)",
                        self.servers, gone, reason, _seconds(self.timeout), limit)

    def answered(self) -> None:
        """The brokers answered (before the watch runs: at the start)."""
        self.down_since = None
        self._last_warning = -math.inf

    def fail(self, exc: SamzaError) -> None:
        if self.error is None:
            self.error = exc
            if self.on_fatal is not None:
                self.on_fatal(exc)

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    async def answers(self, twice_after: float = 0.5) -> bool:
        """Whether the brokers are up and answering now: the watch has not seen them away, and
        a metadata request answers now and again ``twice_after`` seconds later (a broker that is
        shutting down may answer one more request). One that does not answer starts the
        outage's warnings, as the watch's own probe would."""
        for attempt in range(2):
            if self.error is not None or self.down_since is not None:
                return False
            if attempt:
                await asyncio.sleep(twice_after)
            reason = await self._probe()
            if reason is not None:
                self.unavailable(reason)
                return False
        return True

    async def verdict(self) -> SamzaError | None:
        """Once the brokers are away: the watch's error when they stay away past the limit
        (``KafkaUnavailable``), None once they answer again."""
        while self.error is None and self.down_since is not None:
            await asyncio.sleep(min(self.interval, 0.2))
        return self.error

    async def ride_out(self, step: Callable[[], Awaitable[T]]) -> T:
        """``step()``'s result, asked again while the brokers do not answer (before the watch
        runs: as the job starts): a step that fails while they are away is the outage's, with
        its warnings and, past the timeout, its error; one that fails while they answer raises
        its own error."""
        while True:
            try:
                result = await step()
            except SamzaError:
                reason = await self._probe()
                if reason is None:
                    raise
                self.unavailable(reason)
                self.check()
                await asyncio.sleep(self.interval)
                continue
            self.answered()
            return result

    async def guard(self, aw: Awaitable[T]) -> T:
        """``aw``'s result, or the watch's error as soon as it fails the job."""
        if self.error is not None:
            if inspect.iscoroutine(aw):
                aw.close()
            raise self.error
        fut = asyncio.ensure_future(aw)
        # a guard cancelled while it waits leaves ``fut`` to end on its own: its failure (a
        # flush of a task dropped when its member was fenced) was the guard's to report, and
        # nobody's once the guard is gone
        fut.add_done_callback(_retrieved)
        try:
            while True:
                done, _ = await asyncio.wait({fut}, timeout=0.05)
                if done:
                    return fut.result()
                if self.error is not None:
                    raise self.error
        finally:
            if not fut.done():
                fut.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await fut


def _partitions(lost: list[LostLeader]) -> str:
    shown = ", ".join(f"{p.topic!r} partition {p.partition}" for p in lost[:4])
    more = f" and {len(lost) - 4} more" if len(lost) > 4 else ""
    return f"{len(lost)} partition{'s' if len(lost) > 1 else ''} of the job ({shown}{more})"


def _leaderless(stuck: list[LostLeader]) -> str:
    """Why the partitions in ``stuck`` can get no leader that takes writes."""
    first = stuck[0]
    return (f"{_partitions(stuck)} have no leader that takes connections and too few in-sync "
            f"replicas on the brokers up to elect one that takes writes ({first.topic!r} "
            f"partition {first.partition}: {first.live_in_sync} of min.insync.replicas="
            f"{first.min_in_sync})")


def _retrieved(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def _when(down_for: float | None) -> str:
    if down_for is None:  # at the start
        return ""
    if down_for == 0:
        return ", after it dropped the job's connections,"
    return f", back after {_seconds(down_for)} away,"


def missing_topics_error(servers: str, problems: Iterable[str],
                         down_for: float | None) -> KafkaDataLost:
    when = _when(down_for)
    return KafkaDataLost(
        f"Kafka at {servers}{when} lacks the job's topics: {'; '.join(problems)}. The broker "
        f"lost the job's data (restarted without its storage, or the topics were deleted); the "
        f"job stopped rather than reprocess or write into new, empty topics. Restore the "
        f"broker's data, or start the job afresh on purpose (see 'Kafka outages' in "
        f"docs/operations.md)")


def lost_data_error(servers: str, lost: list[tuple[TopicPartition, int, int, int, str]],
                    checkpoint_topic: str, down_for: float | None,
                    reset: str = "samza-dsl reset APP") -> KafkaDataLost:
    """``lost``: (partition, the checkpoint's next offset, the broker's first offset, its end
    offset, what reads it); ``reset`` is the command that starts the job over."""
    when = _when(down_for)
    shown = []
    for tp, need, start, end, what in lost[:5]:
        if end < need:
            shown.append(f"topic {tp.topic!r} partition {tp.partition} ({what}) ends at offset "
                         f"{end}, below the job's checkpoint, which has read it to offset {need}")
        else:
            shown.append(f"topic {tp.topic!r} partition {tp.partition} ({what}) starts at offset "
                         f"{start}, past the checkpoint's offset {need}")
    more = f" (and {len(lost) - 5} more partitions)" if len(lost) > 5 else ""
    return KafkaDataLost(
        f"Kafka at {servers}{when} lost records the job has checkpointed: "
        f"{'; '.join(shown)}{more}. The broker lost data (restarted without its storage, or "
        f"the topic was deleted and recreated, or retention removed records before they were "
        f"read); the job stopped rather than reprocess or skip records silently. Restore the "
        f"broker's data, or start the job afresh on purpose: `{reset}` deletes its checkpoint "
        f"topic {checkpoint_topic!r}, its changelog and intermediate topics and its stores "
        f"under job.dir (see 'Kafka outages' in docs/operations.md)")


def lost_checkpoints_error(servers: str, job_name: str, checkpoint_topic: str, stores: str,
                           found: list[str], reset: str) -> KafkaDataLost:
    """The brokers hold no checkpoint of the job, yet ``stores`` (``<job.dir>/stores``) holds
    local stores that runs of it built: ``found`` says what each holds (the first few are
    named); ``reset`` is the command that starts the job over."""
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return KafkaDataLost(
        f"job {job_name!r}: Kafka at {servers} holds no checkpoint of the job (its checkpoint "
        f"topic {checkpoint_topic!r} is empty), yet {stores} holds the local stores of earlier "
        f"runs, built from checkpoints and changelogs the brokers no longer have: "
        f"{'; '.join(found[:3])}{more}. The brokers lost the job's data (restarted without their "
        f"storage, or its topics were deleted and created again); the job stopped rather than "
        f"go on from stores that do not belong to the topics it would read. Restore the "
        f"brokers' data and run again, or start the job over on purpose: `{reset}` removes its "
        f"local stores and its checkpoint, changelog and intermediate topics (inputs and "
        f"outputs stay), then run it again")
