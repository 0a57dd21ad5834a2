"""The error hierarchy. Every message names the operator, stream, partition or offset at fault
and what to do about it."""

from __future__ import annotations


class SamzaError(Exception):
    """Base of every error samza-dsl raises on purpose.

    Example:
        >>> from samza_dsl import StreamApplication
        >>> try:
        ...     StreamApplication("empty").plan()
        ... except SamzaError as e:  # catches every error below
        ...     print(type(e).__name__, "-", e)
        PlanError - application 'empty-1' has no operators
    """


class PlanError(SamzaError, ValueError):
    """The application graph is invalid: names the streams and operators at fault.

    Example:
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> app = StreamApplication("dangling")
        >>> _ = app.input(MemorySystem().input("in"))
        >>> app.plan()
        Traceback (most recent call last):
        samza_dsl.errors.PlanError: input stream 'in' has no consumer: add an operator on app.input(...) for it, or do not register it
    """


class ConfigError(SamzaError, ValueError):
    """A configuration key or value is wrong: names the key.

    Example:
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> app, mem = StreamApplication("typo"), MemorySystem()
        >>> app.input(mem.input("in")).send_to(app.output(mem.output("out")))
        >>> app.plan(config={"task.max.concurency": 4})
        Traceback (most recent call last):
        samza_dsl.errors.ConfigError: unknown config key 'task.max.concurency' (did you mean 'task.max.concurrency'?): ...
    """


class SerdeError(SamzaError):
    """A message could not be serialized or deserialized.

    Example:
        >>> from samza_dsl.serdes import JsonSerde
        >>> try:
        ...     JsonSerde().deserialize(b"{oops")
        ... except SerdeError as e:
        ...     error = e
        >>> print(error.reason)
        JsonSerde() cannot decode message: JSON is malformed: object keys must be strings (byte 1). ...
        >>> print(error.at(stream="views", partition=1, offset=7))  # where it was read
        JsonSerde() cannot decode message: ... (at stream 'views', partition 1, offset 7); bytes: b'{oops'
    """

    def __init__(self, message: str, *, data: bytes | None = None, stream: str | None = None,
                 partition: int | None = None, offset: int | None = None) -> None:
        self.data = data
        self.stream = stream
        self.partition = partition
        self.offset = offset
        where = []
        if stream is not None:
            where.append(f"stream {stream!r}")
        if partition is not None:
            where.append(f"partition {partition}")
        if offset is not None:
            where.append(f"offset {offset}")
        text = message
        if where:
            text = f"{message} (at {', '.join(where)})"
        if data is not None:
            text = f"{text}; bytes: {truncate_bytes(data)}"
        super().__init__(text)
        self.reason = message

    def at(self, *, stream: str | None = None, partition: int | None = None,
           offset: int | None = None) -> SerdeError:
        """The same error, located at a stream, partition and offset."""
        return SerdeError(self.reason, data=self.data, stream=stream, partition=partition,
                          offset=offset)


class EventTimeAheadError(SerdeError):
    """A message of an input with ``max_event_time_ahead=`` whose event time is further ahead
    of the wall clock than that, under the stream's ``fail`` serde error policy: names the
    stream, partition and offset, and ``event_time`` (seconds) is the message's event time.

    Example:
        >>> e = EventTimeAheadError("event time too far ahead", stream="views", partition=0,
        ...                         offset=3, event_time=253402300799.0)
        >>> isinstance(e, SerdeError), e.offset, e.event_time
        (True, 3, 253402300799.0)
        >>> print(e)
        event time too far ahead (at stream 'views', partition 0, offset 3)
    """

    def __init__(self, message: str, *, stream: str | None = None,
                 partition: int | None = None, offset: int | None = None,
                 event_time: float | None = None) -> None:
        super().__init__(message, stream=stream, partition=partition, offset=offset)
        self.event_time = event_time


class TaskError(SamzaError):
    """A task failed while processing: names the operator, task and offset.

    Example:
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> from samza_dsl.testing import TestRunner
        >>> app, mem = StreamApplication("div"), MemorySystem()
        >>> nums = mem.input("n")
        >>> app.input(nums).map(lambda n: 1 // n, name="invert").send_to(app.output(mem.output("out")))
        >>> try:
        ...     TestRunner(app).add_input(nums, [1, 0]).run()
        ... except TaskError as e:
        ...     print(e.op_id, e.stream, e.partition, e.offset, "-", e)
        div-1-map-invert n 0 1 - operator 'div-1-map-invert' failed in task 'Partition 0' on stream 'n' partition 0 offset 1: ZeroDivisionError: integer division or modulo by zero. ...
    """

    def __init__(self, message: str, *, op_id: str | None = None, task: str | None = None,
                 stream: str | None = None, partition: int | None = None,
                 offset: object = None) -> None:
        super().__init__(message)
        self.op_id = op_id
        self.task = task
        self.stream = stream
        self.partition = partition
        self.offset = offset


class JoinPartitionError(TaskError):
    """A join's key belongs to another partition (or key bucket) than the one its message was
    read from, so the message can never meet the other side (``task.join.partition.check``):
    ``key``, ``belongs`` (the partition the key belongs to) and ``read_from`` (the one the
    message came from) say where."""

    def __init__(self, message: str, *, op_id: str, key: object, belongs: int | None,
                 read_from: int, stream: str) -> None:
        super().__init__(message, op_id=op_id, stream=stream, partition=read_from)
        self.key = key
        self.belongs = belongs
        self.read_from = read_from


class CallbackTimeout(TaskError):
    """A message did not complete within ``task.callback.timeout.ms``: ``op_id`` names the
    operator it waits in, and ``table`` and ``key`` the remote table and key it waits for,
    where known (else None).

    Example:
        >>> import asyncio
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> from samza_dsl.testing import TestRunner
        >>> async def lookup(m):
        ...     await asyncio.sleep(5)  # a call that hangs
        ...     return [m]
        >>> app, mem = StreamApplication("slow"), MemorySystem()
        >>> nums = mem.input("n")
        >>> app.input(nums).async_flat_map(lookup, name="lookup").send_to(app.output(mem.output("out")))
        >>> try:
        ...     TestRunner(app, {"task.callback.timeout.ms": 100}).add_input(nums, [1]).run()
        ... except CallbackTimeout as e:
        ...     print(e.op_id, "|", str(e).split(": ", 1)[1].split(":")[0])
        slow-1-async_flat_map-lookup | the message at 'n' partition 0 offset 0 did not complete within task.callback.timeout.ms=100
    """

    def __init__(self, message: str, *, op_id: str | None = None, task: str | None = None,
                 stream: str | None = None, partition: int | None = None,
                 offset: object = None, table: str | None = None, key: object = None) -> None:
        super().__init__(message, op_id=op_id, task=task, stream=stream, partition=partition,
                         offset=offset)
        self.table = table
        self.key = key


class Interrupted(SamzaError):
    """A run was stopped by a signal before it ended, or did not stop within
    ``task.shutdown.ms`` of being asked to: ``signal`` is the signal's number (None: a stop
    asked for by ``LocalRunner.stop()``), and ``exit_code`` what a shell reports for it
    (128 + the signal: 130 for SIGINT, 143 for SIGTERM; 1 without a signal).

    Example:
        >>> import signal
        >>> e = Interrupted("interrupted by SIGINT before its inputs ended", signal=signal.SIGINT)
        >>> e.exit_code, Interrupted("LocalRunner.stop() ran out of task.shutdown.ms").exit_code
        (130, 1)
    """

    def __init__(self, message: str, *, signal: int | None = None) -> None:
        super().__init__(message)
        self.signal = signal
        self.exit_code = 128 + signal if signal is not None else 1


class RemoteTableError(SamzaError):
    """A call to a remote table failed for good (after the retries its policy allows): names
    the table, the call, the key and the attempts; ``__cause__`` is the last error.

    Example:
        >>> e = RemoteTableError("remote table 'profiles': get('u1') failed 3 times",
        ...                      table="profiles", call="get", key="u1", attempts=3)
        >>> e.table, e.call, e.key, e.attempts
        ('profiles', 'get', 'u1', 3)
    """

    def __init__(self, message: str, *, table: str, call: str, key: object = None,
                 attempts: int = 1) -> None:
        super().__init__(message)
        self.table = table
        self.call = call
        self.key = key
        self.attempts = attempts


class AccessRefused(SamzaError):
    """A system answered and refused the job: its login (a wrong password, no such user or
    database) or its access (no permission on a table or topic). Not an outage: it is not
    retried, and the job stops at once. The message names the system, the user and where the
    secret comes from (a config key, an environment variable, the connection string), never
    the secret.

    Example:
        >>> e = AccessRefused("PostgreSQL system 'pg' refused user 'app'", system="pg",
        ...                   user="app")
        >>> e.system, e.user
        ('pg', 'app')
    """

    def __init__(self, message: str, *, system: str | None = None,
                 user: str | None = None) -> None:
        super().__init__(message)
        self.system = system
        self.user = user


class SparkStartError(SamzaError):
    """Spark's JVM exited before it was up: ``master`` is the master it was given, ``reason``
    the JVM's last lines on standard error (its own reason)."""

    def __init__(self, message: str, *, master: str | None = None,
                 reason: str | None = None) -> None:
        super().__init__(message)
        self.master = master
        self.reason = reason


class ProducerFenced(SamzaError):
    """A newer producer with the same ``transactional.id`` started, so this one may write no
    more: its open transaction is aborted and never becomes visible to read-committed readers.
    ``transactional_id`` names it."""

    def __init__(self, transactional_id: str) -> None:
        super().__init__(
            f"the producer of transactional id {transactional_id!r} was fenced: a newer producer "
            f"with the same transactional.id started (another instance of this task?); its open "
            f"transaction is aborted and none of its records since its last commit will be read "
            f"by read_committed consumers; stop this instance and let the newer one carry on")
        self.transactional_id = transactional_id


class TransactionUnanswered(SamzaError):
    """A step of a transaction (sending its records, its commit or abort) got no answer within
    the producer's timeout. Its outcome is unknown until a producer of the same transactional id
    starts again: the broker then aborts it if it did not complete. Some brokers answer a fenced
    producer's EndTxn with nothing, so this is also how fencing can look."""

    def __init__(self, message: str, transactional_id: str) -> None:
        super().__init__(message)
        self.transactional_id = transactional_id


def truncate_bytes(data: bytes | bytearray | memoryview, limit: int = 64) -> str:
    """A short printable form of raw bytes for error messages."""
    raw = bytes(data)
    if len(raw) <= limit:
        return repr(raw)
    return f"{raw[:limit]!r}... ({len(raw)} bytes)"
