"""Systems and stream descriptors.

A system descriptor names where streams live (Kafka, the embedded local log, or memory for tests);
its ``input()`` and ``output()`` give stream descriptors that ``app.input``/``app.output`` take.

>>> kafka = KafkaSystem("kafka", bootstrap_servers="127.0.0.1:9092")
>>> d = kafka.input("page-views", partitions=4)
>>> d.stream_id, d.system.name, d.physical_name, d.partitions
('page-views', 'kafka', 'page-views', 4)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .serdes import KVSerde, NoOpSerde, Serde

__all__ = ["SystemDescriptor", "KafkaSystem", "LocalSystem", "MemorySystem", "StreamDescriptor",
           "InputDescriptor", "OutputDescriptor", "OFFSET_DEFAULTS", "BOOTSTRAP_RANK"]

OFFSET_DEFAULTS = ("oldest", "upcoming")
#: the rank of a bootstrap input without a priority of its own: above every other input
BOOTSTRAP_RANK = (1 << 63) - 1
_STREAM_ID = re.compile(r"^[A-Za-z0-9._-]+$")
_SYSTEM_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def _check_partitions(what: str, partitions: int | None) -> None:
    if partitions is None:
        return
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        raise ValueError(f"{what}: partitions must be an integer >= 1 or None, got {partitions!r}")


def _optional_ms(value: timedelta | None, what: str) -> int:
    """A duration in ms, 0 for None or zero."""
    from .windows import to_ms

    if value is None or (isinstance(value, timedelta) and not value):
        return 0
    return to_ms(value, what)


@dataclass(frozen=True)
class SystemDescriptor:
    """A named system and its settings. ``factory`` says which runtime system serves it.

    Make one with ``KafkaSystem``, ``LocalSystem`` or ``MemorySystem``.

    Attributes:
        name: The system's name, matching ``[A-Za-z0-9_-]+`` (``systems.<name>.*`` config).
        factory: ``"kafka"``, ``"local"`` or ``"memory"``.
        settings: The system's properties, as sorted ``(key, value)`` pairs.

    Raises:
        ValueError: ``name`` does not match ``[A-Za-z0-9_-]+``.

    Example:
        >>> kafka = KafkaSystem("kafka", bootstrap_servers="127.0.0.1:9092")
        >>> kafka
        SystemDescriptor(name='kafka', factory='kafka', settings=(('bootstrap.servers', '127.0.0.1:9092'),))
        >>> kafka.config  # its settings, as systems.kafka.* config
        {'bootstrap.servers': '127.0.0.1:9092'}
    """

    name: str
    factory: str
    settings: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _SYSTEM_NAME.match(self.name):
            raise ValueError(f"system name must match [A-Za-z0-9_-]+, got {self.name!r}")

    @property
    def config(self) -> dict[str, Any]:
        """The system's properties as a dict (key without the ``systems.<name>.`` prefix)."""
        return dict(self.settings)

    def input(self, stream_id: str, *, serde: Serde[Any] | None = None,
              physical_name: str | None = None, partitions: int | None = None,
              offset_default: str = "oldest",
              event_time: Callable[[Any], float] | None = None,
              max_out_of_orderness: timedelta | None = None,
              idle_timeout: timedelta | None = None, bootstrap: bool = False,
              priority: int | None = None,
              max_event_time_ahead: timedelta | None = None) -> InputDescriptor:
        """An input stream. ``event_time=fn(message) -> seconds`` declares its event time: each
        partition's watermark is then the largest event time processed so far (in handout order,
        over the completed prefix) less ``max_out_of_orderness``. ``idle_timeout``: a partition
        that has had no data for that long stops holding back the watermark until data comes
        again (docs/semantics.md rule 8).

        ``bootstrap=True`` (Samza's ``shouldBootstrap``): each time a task starts, restarts
        included, it reads its partition of this input from its checkpoint to the partition's
        end as of the start, and completes those messages, before it hands out any message of
        its other inputs. ``priority=N`` (Samza's ``withPriority``): when a task has messages
        of several inputs at hand, those of the input with the highest priority go first
        (inputs without one, intermediate streams included, have priority 0; a bootstrap input
        without one ranks above every other input). See "Bootstrap and priority inputs" in
        docs/semantics.md.

        ``max_event_time_ahead=timedelta(...)`` (with ``event_time``): a message whose event
        time is more than that ahead of the wall clock as it is read (a producer's clock gone
        wrong, a year 9999) does not move time: it follows the stream's
        ``streams.<id>.samza.serde.error`` policy, as a record that fails to deserialize
        (``fail`` stops the job naming it, ``skip`` passes over it, ``dead-letter`` also
        writes it to the job's dead-letter stream). See "Event times far ahead" in
        docs/windows.md.

        Args:
            stream_id: The stream's id in the application, matching ``[A-Za-z0-9._-]+``.
            serde: How messages are decoded; a ``KVSerde`` makes the stream deliver
                ``KV(key, value)``. By default messages pass as they are (in-memory streams).
            physical_name: The topic or log name; by default ``stream_id``.
            partitions: The partition count, where the system cannot tell it at run time.
            offset_default: Where to start without a checkpoint: ``"oldest"`` (default) or
                ``"upcoming"``.
            event_time: ``event_time(message)`` gives a message's event time in seconds.
            max_out_of_orderness: With ``event_time``, how far behind the largest event time
                seen a later message of a partition may be.
            idle_timeout: How long a partition may have no data before it stops holding back
                the watermark.
            bootstrap: Read each task's partition to its end as of the task's start before
                the task's other inputs.
            priority: The input's priority, an int (default 0): higher goes first.
            max_event_time_ahead: With ``event_time``, how far ahead of the wall clock a
                message's event time may be; one further ahead follows the stream's serde
                error policy instead of moving the watermark. None: no bound.

        Returns:
            The ``InputDescriptor``, for ``app.input``.

        Raises:
            ValueError: ``stream_id`` is malformed, ``partitions`` is not an int of at least
                1, ``offset_default`` is unknown, a duration is not positive, or
                ``max_out_of_orderness`` or ``max_event_time_ahead`` is given without
                ``event_time``.
            TypeError: ``serde`` is not a ``Serde``, ``event_time`` is not callable, a
                duration is neither a ``timedelta`` nor a number, ``bootstrap`` is not a bool
                or ``priority`` not an int.

        Example:
            >>> from datetime import timedelta
            >>> local = LocalSystem()
            >>> d = local.input("clicks", partitions=2, event_time=lambda m: m["ts"],
            ...                 max_out_of_orderness=timedelta(seconds=5))
            >>> d.physical_name, d.partitions, d.max_out_of_orderness_ms
            ('clicks', 2, 5000)
            >>> local.input("clicks", event_time=lambda m: m["ts"],
            ...             max_event_time_ahead=timedelta(hours=1)).max_event_time_ahead_ms
            3600000
            >>> profiles = local.input("profiles", bootstrap=True)
            >>> profiles.bootstrap, profiles.rank, local.input("alerts", priority=2).rank
            (True, 9223372036854775807, 2)
        """
        return InputDescriptor(
            self, stream_id, serde, physical_name or stream_id, partitions, offset_default,
            event_time, _optional_ms(max_out_of_orderness, f"input {stream_id!r} max_out_of_orderness"),
            _optional_ms(idle_timeout, f"input {stream_id!r} idle_timeout"), bootstrap, priority,
            max_event_time_ahead_ms=_optional_ms(
                max_event_time_ahead, f"input {stream_id!r} max_event_time_ahead"))

    def output(self, stream_id: str, *, serde: Serde[Any] | None = None,
               physical_name: str | None = None, partitions: int | None = None) -> OutputDescriptor:
        """An output stream.

        Args:
            stream_id: The stream's id in the application, matching ``[A-Za-z0-9._-]+``.
            serde: How messages are encoded; with a ``KVSerde``, a ``KV`` is written as key and
                value. By default messages pass as they are (in-memory streams).
            physical_name: The topic or log name; by default ``stream_id``.
            partitions: The partition count, where the system cannot tell it at run time.

        Returns:
            The ``OutputDescriptor``, for ``app.output``.

        Raises:
            ValueError: ``stream_id`` is malformed, or ``partitions`` is not an int of at
                least 1.
            TypeError: ``serde`` is not a ``Serde``.

        Example:
            >>> from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
            >>> kafka = KafkaSystem("kafka", bootstrap_servers="127.0.0.1:9092")
            >>> d = kafka.output("counts", serde=KVSerde(StringSerde(), JsonSerde()),
            ...                  physical_name="page-view-counts")
            >>> d.stream_id, d.physical_name, d.keyed
            ('counts', 'page-view-counts', True)
        """
        return OutputDescriptor(self, stream_id, serde, physical_name or stream_id, partitions)

    def to_config(self) -> dict[str, Any]:
        """Samza-style ``systems.<name>.*`` config.

        Returns:
            The system's factory and properties under ``systems.<name>.``.

        Example:
            >>> LocalSystem("log", path="/tmp/log").to_config()
            {'systems.log.samza.factory': 'local', 'systems.log.path': '/tmp/log'}
        """
        out: dict[str, Any] = {f"systems.{self.name}.samza.factory": self.factory}
        for key, value in self.settings:
            out[f"systems.{self.name}.{key}"] = value
        return out


def KafkaSystem(name: str, *, bootstrap_servers: str | list[str],  # noqa: N802 - factory
                consumer: Mapping[str, Any] | None = None,
                producer: Mapping[str, Any] | None = None,
                **settings: Any) -> SystemDescriptor:
    """A Kafka system. ``consumer``/``producer`` settings are passed to aiokafka as they are.

    Args:
        name: The system's name, matching ``[A-Za-z0-9_-]+``.
        bootstrap_servers: ``"host:port"`` or a comma-separated list of them, or a list.
        consumer: aiokafka consumer settings (``systems.<name>.consumer.<key>``).
        producer: aiokafka producer settings (``systems.<name>.producer.<key>``).
        **settings: Other system properties (``systems.<name>.<key>``).

    Returns:
        The system descriptor; its ``input()`` and ``output()`` describe topics.

    Raises:
        ValueError: ``bootstrap_servers`` is empty or not a str (or list of them), or
            ``name`` is malformed.

    Example:
        >>> kafka = KafkaSystem("kafka", bootstrap_servers=["k1:9092", "k2:9092"],
        ...                     consumer={"fetch_max_wait_ms": 100})
        >>> kafka.config
        {'bootstrap.servers': 'k1:9092,k2:9092', 'consumer.fetch_max_wait_ms': 100}
    """
    if isinstance(bootstrap_servers, list | tuple):
        bootstrap_servers = ",".join(bootstrap_servers)
    if not isinstance(bootstrap_servers, str) or not bootstrap_servers.strip():
        raise ValueError(f"KafkaSystem({name!r}) needs bootstrap_servers like '127.0.0.1:9092', "
                         f"got {bootstrap_servers!r}")
    items: dict[str, Any] = {"bootstrap.servers": bootstrap_servers}
    for key, value in (consumer or {}).items():
        items[f"consumer.{key}"] = value
    for key, value in (producer or {}).items():
        items[f"producer.{key}"] = value
    items.update(settings)
    return SystemDescriptor(name, "kafka", tuple(sorted(items.items())))


def LocalSystem(name: str = "local", path: str | None = None) -> SystemDescriptor:  # noqa: N802
    """The embedded default: an LMDB-backed partitioned log in ``path`` (default: the job dir).

    Args:
        name: The system's name, matching ``[A-Za-z0-9_-]+``; default ``"local"``.
        path: The log's directory; by default the job dir.

    Returns:
        The system descriptor.

    Raises:
        ValueError: ``name`` is malformed.

    Example:
        >>> LocalSystem().input("events").system.factory
        'local'
    """
    return SystemDescriptor(name, "local", (("path", path),) if path else ())


def MemorySystem(name: str = "memory") -> SystemDescriptor:  # noqa: N802
    """In-memory streams, for tests and examples.

    Args:
        name: The system's name, matching ``[A-Za-z0-9_-]+``; default ``"memory"``.

    Returns:
        The system descriptor.

    Raises:
        ValueError: ``name`` is malformed.

    Example:
        >>> mem = MemorySystem()
        >>> mem.input("words").stream_id, mem.output("counts").keyed
        ('words', False)
    """
    return SystemDescriptor(name, "memory")


@dataclass(frozen=True)
class StreamDescriptor:
    """A stream of a system: what ``system.input()`` and ``system.output()`` share.

    Attributes:
        system: The ``SystemDescriptor`` the stream lives in.
        stream_id: The stream's id in the application.
        serde: The stream's serde, or None (messages pass as they are).
        physical_name: The topic or log name.
        partitions: The partition count, or None where the system tells it at run time.

    Raises:
        ValueError: ``stream_id`` is malformed, or ``partitions`` is not an int of at least 1.
        TypeError: ``serde`` is not a ``Serde``.

    Example:
        >>> from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
        >>> local = LocalSystem()
        >>> views = local.input("views", serde=JsonSerde(), partitions=4)
        >>> views.stream_id, views.physical_name, views.partitions, views.keyed
        ('views', 'views', 4, False)
        >>> local.output("counts", serde=KVSerde(StringSerde(), JsonSerde())).keyed
        True
        >>> local.input("raw").effective_serde  # none given: messages pass as they are
        NoOpSerde()
    """

    system: SystemDescriptor
    stream_id: str
    serde: Serde[Any] | None
    physical_name: str
    partitions: int | None

    def __post_init__(self) -> None:
        if not isinstance(self.stream_id, str) or not _STREAM_ID.match(self.stream_id):
            raise ValueError(f"stream id must match [A-Za-z0-9._-]+, got {self.stream_id!r}")
        if self.serde is not None and not isinstance(self.serde, Serde):
            raise TypeError(f"stream {self.stream_id!r}: serde must be a Serde such as JsonSerde(), "
                            f"got {type(self.serde).__name__}")
        _check_partitions(f"stream {self.stream_id!r}", self.partitions)

    @property
    def keyed(self) -> bool:
        """A keyed stream (KVSerde) delivers KV(key, value)."""
        return isinstance(self.serde, KVSerde)

    @property
    def effective_serde(self) -> Serde[Any]:
        """The stream's serde, or a ``NoOpSerde`` when it has none."""
        return self.serde if self.serde is not None else NoOpSerde()

    @property
    def event_time(self) -> Callable[[Any], float] | None:
        """``event_time(message)`` in seconds: an input's declared one; None for an output
        (read back, its messages have none)."""
        return None

    @property
    def max_event_time_ahead_ms(self) -> int:
        """How far ahead of the wall clock an input's event time may be (0: no bound, as for
        an output)."""
        return 0


@dataclass(frozen=True)
class InputDescriptor(StreamDescriptor):
    """An input stream, from ``system.input()``; pass it to ``app.input``.

    Attributes:
        offset_default: Where to start without a checkpoint: ``"oldest"`` or ``"upcoming"``.
        event_time: ``event_time(message)`` gives an event time in seconds, or None.
        max_out_of_orderness_ms: How far behind the largest event time seen a later message
            of a partition may be.
        idle_timeout_ms: A partition without data for this long is idle (0: never).
        bootstrap: Each task reads its partition to its end as of its start first.
        priority: The declared priority, or None (0, or above all for a bootstrap input).
        side_input_of: The table this input fills as a side input, or None.
        max_event_time_ahead_ms: How far ahead of the wall clock, as it is read, a message's
            event time may be before it follows the stream's serde error policy (0: no bound).

    Raises:
        ValueError: ``offset_default`` is unknown, or an out-of-orderness bound is given
            without ``event_time``.
        TypeError: ``event_time`` is not callable, ``bootstrap`` is not a bool or
            ``priority`` not an int.

    Example:
        >>> from datetime import timedelta
        >>> kafka = KafkaSystem("kafka", bootstrap_servers="127.0.0.1:9092")
        >>> views = kafka.input("views", event_time=lambda m: m["ts"], offset_default="upcoming",
        ...                     max_out_of_orderness=timedelta(seconds=5))
        >>> views.offset_default, views.max_out_of_orderness_ms, views.bootstrap
        ('upcoming', 5000, False)
        >>> kafka.input("views", offset_default="newest")
        Traceback (most recent call last):
        ValueError: input 'views': offset_default must be one of ('oldest', 'upcoming'), got 'newest'
    """

    offset_default: str = "oldest"
    event_time: Callable[[Any], float] | None = field(default=None)
    #: how far behind the largest event time seen a later message of a partition may be
    max_out_of_orderness_ms: int = 0
    #: a partition without data for this long is idle (0: never)
    idle_timeout_ms: int = 0
    #: read to the end as of each start before the task's other inputs
    bootstrap: bool = False
    #: higher goes first; None: 0, or above every other input for a bootstrap input
    priority: int | None = None
    #: the table this input fills, as a side input (set by ``app.table(side_inputs=...)``)
    side_input_of: str | None = None
    #: a message whose event time is further ahead of the wall clock follows the stream's
    #: serde error policy (0: no bound)
    max_event_time_ahead_ms: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.offset_default not in OFFSET_DEFAULTS:
            raise ValueError(f"input {self.stream_id!r}: offset_default must be one of "
                             f"{OFFSET_DEFAULTS}, got {self.offset_default!r}")
        if self.event_time is not None and not callable(self.event_time):
            raise TypeError(f"input {self.stream_id!r}: event_time must be callable")
        if self.max_out_of_orderness_ms and self.event_time is None:
            raise ValueError(f"input {self.stream_id!r}: max_out_of_orderness needs "
                             f"event_time=fn(message) -> seconds on the same input (or give it "
                             f"to the window, next to the window's event_time)")
        if self.max_event_time_ahead_ms and self.event_time is None:
            raise ValueError(f"input {self.stream_id!r}: max_event_time_ahead needs "
                             f"event_time=fn(message) -> seconds on the same input: only a "
                             f"declared event time can be checked as a message is read")
        if not isinstance(self.bootstrap, bool):
            raise TypeError(f"input {self.stream_id!r}: bootstrap must be True or False, got "
                            f"{self.bootstrap!r}")
        if self.priority is not None and (not isinstance(self.priority, int)
                                          or isinstance(self.priority, bool)):
            raise TypeError(f"input {self.stream_id!r}: priority must be an int (higher goes "
                            f"first), got {self.priority!r}")

    @property
    def rank(self) -> int:
        """Where the input's messages go when a task has several inputs' at hand: higher first.
        The declared ``priority``; else 0, or ``BOOTSTRAP_RANK`` (above every other input) for
        a bootstrap input."""
        if self.priority is not None:
            return self.priority
        return BOOTSTRAP_RANK if self.bootstrap else 0


@dataclass(frozen=True)
class OutputDescriptor(StreamDescriptor):
    """An output stream, from ``system.output()``; pass it to ``app.output``.

    Example:
        >>> from samza_dsl import StreamApplication
        >>> mem = MemorySystem()
        >>> counts = mem.output("counts", partitions=2)
        >>> type(counts).__name__, counts.partitions
        ('OutputDescriptor', 2)
        >>> app = StreamApplication("copy")
        >>> app.input(mem.input("in")).send_to(app.output(counts))
        >>> app.plan().output_streams["counts"].partitions
        2
    """

    pass
