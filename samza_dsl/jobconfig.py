"""The job's config, typed: one ``JobConfig``, built once where a job is made, handed down.

A ``JobConfig`` is the validated mapping of keys a job runs with (what ``ctx.config`` shows a
user's functions, unchanged) and, next to it, typed parts every room reads instead of strings:
``task``, ``job`` (its containers, coordination and guarantee), ``health``, ``metrics``, and
per name ``store(name)``, ``system(name)`` (its client and security settings) and
``stream(id)``. Each field of a part names its key in the registry (``KNOWN_KEYS``,
``STORE_PROPERTIES``, ``STREAM_PROPERTIES``, ``SYSTEM_PROPERTIES``); an absent key, or one
given as None, is the registry's default, so a default is written in one place; a part's
``given(field)`` says whether the config gave the field's key (a Kafka topic's retention left to
the broker, a store's cache size left to its runner).

>>> config = JobConfig.validated({"task.commit.ms": "5", "stores.counts.write.batch.size": 7})
>>> config.task.commit_ms, config.task.max_concurrency, config.store("counts").write_batch_size
(5, 1, 7)
>>> config["task.commit.ms"], "task.max.concurrency" in config
(5, False)
>>> config.task.given("commit_ms"), config.task.given("max_concurrency")
(True, False)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .config import (
    EXACTLY_ONCE,
    KNOWN_KEYS,
    STORE_PROPERTIES,
    STREAM_PROPERTIES,
    ConfigKey,
    check_job_name,
    shown_config,
    validate_config,
)

__all__ = ["JobConfig", "TaskConfig", "JobSettings", "HealthConfig", "QueryConfig", "MetricsConfig",
           "TracingConfig", "StoreConfig", "StreamConfig", "SystemConfig", "SecurityConfig",
           "KEY_OF_FIELD", "job_config"]

#: the metadata name under which a part's field names its key
KEY_OF_FIELD = "key"


def _key(name: str) -> Any:
    return field(metadata={KEY_OF_FIELD: name})


class _Part:
    """What every typed part made from the registry knows besides its fields: which of their
    keys the config gave (``_given`` is set where the part is made, and is no field of it)."""

    _given: frozenset[str] = frozenset()

    def given(self, name: str) -> bool:
        """Whether the config gave the key of field ``name`` (not None), rather than leaving
        it to the registry's default; a name that is no field of the part is an error."""
        if name not in {f.name for f in dataclasses.fields(self)}:  # type: ignore[arg-type]
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        return name in self._given


@dataclass(frozen=True)
class TaskConfig(_Part):
    """``task.*``: how each task handles, commits and times its messages."""

    max_concurrency: int = _key("task.max.concurrency")
    batch_handout: bool = _key("task.batch.handout")
    callback_timeout_ms: int = _key("task.callback.timeout.ms")
    commit_ms: int = _key("task.commit.ms")
    window_ms: int = _key("task.window.ms")
    async_commit: bool = _key("task.async.commit")
    checkpoint_system: str | None = _key("task.checkpoint.system")
    shutdown_ms: int = _key("task.shutdown.ms")
    join_partition_check: str = _key("task.join.partition.check")
    progress_ms: int = _key("task.progress.ms")


@dataclass(frozen=True)
class JobSettings(_Part):
    """``job.*`` but health: the job's name, its containers, how they share tasks, its
    guarantee and where its state lives."""

    name: str | None = _key("job.name")
    id: str | None = _key("job.id")
    processing_guarantee: str = _key("job.processing.guarantee")
    container_count: int = _key("job.container.count")
    container_id: int | None = _key("job.container.id")
    thread_pool_size: int = _key("job.container.thread.pool.size")
    coordinator: str | None = _key("job.coordinator")
    standby_replicas: int = _key("job.standbytasks.replication.factor")
    elasticity_factor: int = _key("job.elasticity.factor")
    intermediate_partitions: int | None = _key("job.intermediate.stream.partitions")
    default_system: str | None = _key("job.default.system")
    changelog_system: str | None = _key("job.changelog.system")
    dir: str | None = _key("job.dir")
    kafka_unavailable_timeout_ms: int = _key("job.kafka.unavailable.timeout.ms")
    kafka_partition_check_ms: int = _key("job.kafka.partition.check.ms")
    bounded_stall_ms: int = _key("job.bounded.stall.ms")

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee == EXACTLY_ONCE

    @property
    def job_name(self) -> str:
        """``<job.name>-<job.id>``, what the job's streams, group and ``job.dir`` are named
        after: by default the application's name and app_id (``JobConfig.of``)."""
        return check_job_name(self.name, self.id)


@dataclass(frozen=True)
class HealthConfig(_Part):
    """``job.health.*``: each container's liveness and readiness endpoint."""

    port: int = _key("job.health.port")
    host: str = _key("job.health.host")
    liveness_ms: int = _key("job.health.liveness.ms")


@dataclass(frozen=True)
class QueryConfig(_Part):
    """``query.*``: each container's endpoint for interactive queries of its stores."""

    enabled: bool = _key("query.enabled")
    host: str = _key("query.host")
    port: int = _key("query.port")
    token: str | None = _key("query.token")


@dataclass(frozen=True)
class MetricsConfig(_Part):
    """``metrics.*``: operator metrics and the reporters that publish them."""

    operators: bool = _key("metrics.operators")
    reporters: str = _key("metrics.reporters")
    reporter_interval_ms: int = _key("metrics.reporter.interval.ms")
    prometheus_port: int = _key("metrics.reporter.prometheus.port")
    prometheus_host: str = _key("metrics.reporter.prometheus.host")
    json_path: str | None = _key("metrics.reporter.json.path")


@dataclass(frozen=True)
class TracingConfig(_Part):
    """``tracing.*``: whether the job traces through the OpenTelemetry SDK, what it samples and
    where its spans go (docs/tracing.md)."""

    enabled: bool = _key("tracing.enabled")
    sample_ratio_text: str = _key("tracing.sample.ratio")
    exporter: str = _key("tracing.exporter")
    otlp_endpoint: str = _key("tracing.otlp.endpoint")

    @property
    def sample_ratio(self) -> float:
        return float(self.sample_ratio_text)


@dataclass(frozen=True)
class StoreConfig(_Part):
    """``stores.<name>.*``: one store's changelog and sizes."""

    changelog: str | None = _key("changelog")
    object_cache_size: int = _key("object.cache.size")
    write_batch_size: int = _key("write.batch.size")
    pane_cache_size: int = _key("pane.cache.size")
    changelog_compaction: bool = _key("changelog.compaction")
    changelog_delete_retention_ms: int = _key("changelog.delete.retention.ms")


@dataclass(frozen=True)
class StreamConfig(_Part):
    """``streams.<id>.*``: one stream's system, name, partitions, retention and serde policy."""

    serde_error: str = _key("samza.serde.error")
    system: str | None = _key("samza.system")
    physical_name: str | None = _key("samza.physical.name")
    intermediate: bool = _key("samza.intermediate")
    broadcast: bool = _key("samza.broadcast")
    partitions: int | None = _key("partitions")
    retention_ms: int = _key("retention.ms")
    retention_bytes: int = _key("retention.bytes")


@dataclass(frozen=True)
class SecurityConfig:
    """A Kafka system's security settings, as given (a password may be ``env:VAR`` or
    ``file:PATH``, resolved where a client is made); ``repr`` never shows a password."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "SCRAM-SHA-512"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True


@dataclass(frozen=True)
class SystemConfig:
    """``systems.<name>.*``: one system's kind, where it is, and its clients' settings."""

    name: str
    factory: str | None = None
    bootstrap_servers: str | None = None
    #: a Kafka system's ``replication.factor`` and ``min.insync.replicas``, as given (checked
    #: where its topics are made)
    replication_factor: Any = None
    min_insync_replicas: Any = None
    #: a local system's ``path`` and ``log.max.bytes``, as given
    path: str | None = None
    log_max_bytes: Any = None
    properties: Mapping[str, Any] = field(default_factory=dict, repr=False)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    consumer: Mapping[str, Any] = field(default_factory=dict, repr=False)
    producer: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def over(self, own: Mapping[str, Any]) -> SystemConfig:
        """These settings over ``own``, those the system's descriptor gives (``KafkaSystem(...,
        consumer={...}, **{"security.protocol": ...})``): the config points a job at another
        cluster, or logs it in otherwise, with no change to the application."""
        return _system_config(self.name, {**own, **self.properties})


P = TypeVar("P")
T = TypeVar("T", bound=_Part)


def _part(cls: type[T], registry: Mapping[str, ConfigKey], values: Mapping[str, Any],
          prefix: str = "", **fallback: Any) -> T:
    """A part whose every field is its key's value in ``values`` (where that is empty and
    ``fallback`` names the field, its value there), or the registry's default; it knows which
    of its keys ``values`` gave."""
    kwargs = {}
    given = set()
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        spec = registry[f.metadata[KEY_OF_FIELD]]
        value = values.get(prefix + spec.name)
        if value is not None:
            given.add(f.name)
        if not value and f.name in fallback:
            value = fallback[f.name]
        kwargs[f.name] = spec.default if value is None else value
    part = cls(**kwargs)
    object.__setattr__(part, "_given", frozenset(given))
    return part


_SECURITY_KEYS = {"security.protocol": "protocol", "sasl.mechanism": "sasl_mechanism",
                  "sasl.username": "sasl_username", "sasl.password": "sasl_password",
                  "ssl.cafile": "ssl_cafile", "ssl.certfile": "ssl_certfile",
                  "ssl.keyfile": "ssl_keyfile", "ssl.key.password": "ssl_key_password",
                  "ssl.check.hostname": "ssl_check_hostname"}


def _system_config(name: str, props: Mapping[str, Any]) -> SystemConfig:
    security = {attr: props[key] for key, attr in _SECURITY_KEYS.items()
                if props.get(key) is not None}
    if "ssl_check_hostname" in security:
        security["ssl_check_hostname"] = str(security["ssl_check_hostname"]).strip().lower() \
            not in ("false", "0", "no")
    return SystemConfig(
        name, props.get("samza.factory"), props.get("bootstrap.servers"),
        props.get("replication.factor"), props.get("min.insync.replicas"), props.get("path"),
        props.get("log.max.bytes"), dict(props), SecurityConfig(**security),
        {k[9:]: v for k, v in props.items() if k.startswith("consumer.")},
        {k[9:]: v for k, v in props.items() if k.startswith("producer.")})


class JobConfig(Mapping[str, Any]):
    """The validated keys of a job (a read-only mapping) and their typed parts.

    Build it once where a job is made: ``JobConfig.of(app, given)`` (the application's own
    config under what the run is given), or ``JobConfig.validated(config)``; a ``JobConfig``
    passed to either is used as it is.
    """

    __slots__ = ("_values", "_app", "task", "job", "health", "query", "metrics", "tracing",
                 "_parts")

    _values: dict[str, Any]
    _app: tuple[str, str] | None
    _parts: dict[tuple[str, str], Any]
    task: TaskConfig
    job: JobSettings
    health: HealthConfig
    query: QueryConfig
    metrics: MetricsConfig
    tracing: TracingConfig

    def __init__(self, values: Mapping[str, Any], app: tuple[str, str] | None = None) -> None:
        """``values`` are validated already (``validate_config``); ``app`` is the application's
        (name, app_id): ``job.name`` and ``job.id`` where the values do not give them."""
        set_ = object.__setattr__
        set_(self, "_values", dict(values))
        set_(self, "_app", app)
        set_(self, "task", _part(TaskConfig, KNOWN_KEYS, values))
        named = {} if app is None else {"name": app[0], "id": app[1]}
        set_(self, "job", _part(JobSettings, KNOWN_KEYS, values, **named))
        set_(self, "health", _part(HealthConfig, KNOWN_KEYS, values))
        set_(self, "query", _part(QueryConfig, KNOWN_KEYS, values))
        set_(self, "metrics", _part(MetricsConfig, KNOWN_KEYS, values))
        set_(self, "tracing", _part(TracingConfig, KNOWN_KEYS, values))
        set_(self, "_parts", {})

    @classmethod
    def validated(cls, config: Mapping[str, Any] | None) -> JobConfig:
        """``config`` checked and converted (``validate_config``), or ``config`` itself when it
        is a ``JobConfig`` already."""
        return config if isinstance(config, JobConfig) else cls(validate_config(config))

    @classmethod
    def of(cls, app: Any, given: Mapping[str, Any] | None = None) -> JobConfig:
        """The config a job of ``app`` runs with: the application's own (``StreamApplication(
        config=...)``) under what the run is given (a runner's ``config=``, the CLI's ``-c``,
        which is applied last)."""
        names = (str(app.name), str(app.app_id))
        if isinstance(given, JobConfig) and given._app == names:  # made for it already
            return given
        own = validate_config(getattr(app, "config", None))
        return cls({**own, **validate_config(given)}, names)

    def with_keys(self, extra: Mapping[str, Any]) -> JobConfig:
        """This config with ``extra`` (validated keys the planner generates) under it."""
        return JobConfig({**extra, **self._values}, self._app)

    def updated(self, keys: Mapping[str, Any]) -> JobConfig:
        """This config with ``keys`` (checked and converted) over it: a command's own settings
        (``job.coordinator=static`` where it runs no containers, a page's reporters)."""
        return JobConfig({**self._values, **validate_config(keys)}, self._app)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a JobConfig is read-only: {name} cannot be set")

    def __reduce__(self) -> tuple[type[JobConfig], tuple[dict[str, Any], tuple[str, str] | None]]:
        """Made again from its keys where a plan is shipped (Spark's executors)."""
        return JobConfig, (self._values, self._app)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"JobConfig({shown_config(self._values)!r})"

    def store(self, name: str) -> StoreConfig:
        """Store ``name``'s settings (``stores.<name>.*``)."""
        return self._cached(("store", name), lambda: _part(
            StoreConfig, STORE_PROPERTIES, self._values, f"stores.{name}."))

    def stream(self, stream_id: str) -> StreamConfig:
        """Stream ``stream_id``'s settings (``streams.<id>.*``)."""
        return self._cached(("stream", stream_id), lambda: _part(
            StreamConfig, STREAM_PROPERTIES, self._values, f"streams.{stream_id}."))

    def system(self, name: str, own: Mapping[str, Any] | None = None) -> SystemConfig:
        """System ``name``'s settings (``systems.<name>.*``), over ``own``, those its descriptor
        gives where given (``SystemConfig.over``)."""
        typed = self._cached(("system", name), lambda: self._system(name))
        return typed if own is None else typed.over(own)

    @property
    def systems(self) -> Mapping[str, SystemConfig]:
        """Each system's settings by its name, as ``system(name)`` gives them."""
        return _Systems(self)

    def _system(self, name: str) -> SystemConfig:
        prefix = f"systems.{name}."
        return _system_config(name, {k[len(prefix):]: v for k, v in self._values.items()
                                     if k.startswith(prefix)})

    def _cached(self, key: tuple[str, str], make: Callable[[], P]) -> P:
        parts: dict[tuple[str, str], Any] = self._parts
        if key not in parts:
            parts[key] = make()
        part: P = parts[key]
        return part


class _Systems(Mapping[str, SystemConfig]):
    """``JobConfig.systems``: a system's part made when it is first asked for."""

    __slots__ = ("_config",)

    def __init__(self, config: JobConfig) -> None:
        self._config = config

    def __getitem__(self, name: str) -> SystemConfig:
        return self._config.system(name)

    def __iter__(self) -> Iterator[str]:
        names = {k.split(".")[1] for k in self._config if k.startswith("systems.")}
        return iter(sorted(names))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def job_config(app: Any, given: Mapping[str, Any] | None = None) -> JobConfig:
    """The config a job of ``app`` runs with (``JobConfig.of``): the application's own
    (``StreamApplication(config=...)``) under what the run is given (a runner's ``config=``, the
    CLI's ``-c``, which is applied last). It is built once where a job is made and handed down,
    so a key means the same wherever it was given.

    >>> class App: name, app_id, config = "clicks", "1", {"job.dir": "/srv/a", "task.commit.ms": 5}
    >>> config = job_config(App(), {"task.commit.ms": "7"})
    >>> sorted(config.items()), config.task.commit_ms, config.job.job_name
    ([('job.dir', '/srv/a'), ('task.commit.ms', 7)], 7, 'clicks-1')
    """
    return JobConfig.of(app, given)
