"""Configuration keys, with Samza's names and defaults, and their validation.

Every key is one the job reads, or a user's own key under ``user.`` (passed through unchecked,
for the application's functions to read from ``ctx.config``). Any other key (an unknown
``task.``/``job.``/``metrics.`` key, a key under another namespace such as ``serializers.`` or
``app.``, or with an unknown prefix) is an error that names the key and the closest known one,
as are ``streams.<id>.*``, ``stores.<name>.*`` and ``systems.<name>.*`` keys naming a stream,
store, system or property the application does not have (``check_scoped_keys`` and
``check_system_keys``, called by the planner).

>>> validate_config({"task.max.concurrency": "16"})["task.max.concurrency"]
16
>>> validate_config({"task.max.concurency": 4})
Traceback (most recent call last):
...
samza_dsl.errors.ConfigError: unknown config key 'task.max.concurency' (did you mean 'task.max.concurrency'?)...
"""

from __future__ import annotations

import difflib
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = ["ConfigKey", "KNOWN_KEYS", "STREAM_PROPERTIES", "STORE_PROPERTIES", "SYSTEM_PROPERTIES",
           "USER_PREFIX", "COORDINATORS", "check_system_keys", "validate_config",
           "check_scoped_keys", "config_value", "SERDE_ERROR_POLICIES", "KeyReference",
           "key_reference", "JOIN_CHECK_POLICIES", "GUARANTEES", "AT_LEAST_ONCE",
           "EXACTLY_ONCE", "check_guarantee", "exactly_once", "check_job_name",
           "SECURITY_PROTOCOLS", "SASL_MECHANISMS", "SECRET_PROPERTIES", "is_secret",
           "shown_value", "shown_config", "secret_value", "connection_secrets", "secret_fragments", "redact"]

SERDE_ERROR_POLICIES = ("fail", "skip", "dead-letter")
_JOB_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
#: the values of ``job.coordinator``
COORDINATORS = ("kafka", "static")
#: what a join does with a message whose join key belongs to another task's partition
JOIN_CHECK_POLICIES = ("fail", "warn", "off")
AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
#: the values of ``job.processing.guarantee``
GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE)


@dataclass(frozen=True)
class ConfigKey:
    name: str
    kind: type
    default: Any
    check: Callable[[Any], bool] | None = None
    rule: str = ""
    doc: str = ""


def _k(name: str, kind: type, default: Any, check: Callable[[Any], bool] | None = None,
       rule: str = "", doc: str = "") -> ConfigKey:
    return ConfigKey(name, kind, default, check, rule, doc)


def _ratio(text: str) -> bool:
    try:
        return 0.0 <= float(text) <= 1.0
    except ValueError:
        return False


_POSITIVE = (lambda v: v >= 1, "an integer >= 1")
_NON_NEGATIVE = (lambda v: v >= 0, "an integer >= 0")
_TIMEOUT = (lambda v: v == -1 or v > 0, "-1 (off) or a positive number of milliseconds")

KNOWN_KEYS: dict[str, ConfigKey] = {k.name: k for k in [
    _k("task.max.concurrency", int, 1, *_POSITIVE, doc="messages in flight per task"),
    _k("task.batch.handout", bool, True,
       doc="hand a run of a partition's messages to the operators in one call where the job's "
       "shape allows (outputs, late messages and metrics are those of one message at a time); "
       "false hands out one message at a time"),
    _k("task.callback.timeout.ms", int, -1, *_TIMEOUT,
       doc="fail a task whose message has not completed in this time; -1 is off"),
    _k("task.commit.ms", int, 60000, lambda v: v == -1 or v > 0,
       "-1 (only at end) or a positive number of milliseconds", doc="commit interval"),
    _k("task.window.ms", int, -1, lambda v: v == -1 or v > 0,
       "-1 (off) or a positive number of milliseconds", doc="window timer interval"),
    _k("task.async.commit", bool, False, doc="allow commits while messages are in flight"),
    _k("job.processing.guarantee", str, AT_LEAST_ONCE, GUARANTEES.__contains__,
       f"one of {', '.join(GUARANTEES)}",
       doc="at-least-once: a crash may emit some outputs again; exactly-once: a task's outputs, "
           "intermediate-stream records, changelog entries, dead letters and checkpoint are "
           "written in one transaction at its commit, and readers see none of them before "
           "(the embedded local system; outputs then appear at the commit interval)"),
    _k("task.checkpoint.system", str, None, doc="system that stores checkpoints"),
    _k("task.shutdown.ms", int, 30000, *_POSITIVE, doc="time a container has to stop cleanly (drain, commit, close) once asked; "
       "past it, the run stops without waiting for its messages in flight and names them "
       "(exit code 130 after SIGINT, 143 after SIGTERM)"),
    _k("metrics.operators", bool, True,
       doc="count and time every operator (messages-in, messages-out, handle-ns)"),
    _k("metrics.reporters", str, "",
       doc="comma-separated reporters: prometheus, snapshot, json, otel (OTLP, tracing.otlp.endpoint)"),
    _k("metrics.reporter.interval.ms", int, 10000, *_POSITIVE,
       doc="how often the snapshot and json reporters write"),
    _k("metrics.reporter.prometheus.port", int, 9464, *_NON_NEGATIVE,
       doc="the Prometheus endpoint's port on metrics.reporter.prometheus.host (0: any free)"),
    _k("metrics.reporter.prometheus.host", str, "127.0.0.1",
       doc="the address the Prometheus endpoint listens on"),
    _k("metrics.reporter.json.path", str, None,
       doc="the file the json reporter rewrites (default <job.dir>/metrics-<container>.json)"),
    _k("tracing.enabled", bool, False,
       doc="trace the job through the OpenTelemetry SDK (the otel extra): a span per batch a "
           "task is given and one per sampled message (docs/tracing.md)"),
    _k("tracing.sample.ratio", str, "0.01", lambda v: _ratio(v), "a number from 0 to 1",
       doc="the share of messages traced, chosen by their input position (the same in every run)"),
    _k("tracing.exporter", str, "otlp", ("otlp", "memory", "none").__contains__,
       "one of otlp, memory, none",
       doc="where spans go: otlp (tracing.otlp.endpoint), memory (the SDK's in-memory "
           "exporter, for tests) or none"),
    _k("tracing.otlp.endpoint", str, "http://127.0.0.1:4318",
       doc="the OTLP/HTTP collector spans and the otel reporter's metrics are sent to"),
    _k("task.join.partition.check", str, "fail", JOIN_CHECK_POLICIES.__contains__,
       "one of " + ", ".join(JOIN_CHECK_POLICIES),
       doc="what a join (or join_table) does with a message whose join key belongs to another "
           "partition than the one it was read from (murmur2 of the key serialized by the "
           "stream's key serde, as a producer places it; with job.elasticity.factor, another "
           "key bucket), where it can never meet the other side: fail stops the job with an "
           "error naming the join, the key and both partitions; warn logs the first such "
           "message of each join side in each task and goes on; off does not check. Each "
           "join side checks every message of the first 1024 in each task, then 1 in 256. "
           "Broadcast streams, remote tables and tables written only from broadcast streams, "
           "which every task holds whole, are not checked"),
    _k("task.progress.ms", int, 1000, lambda v: v == -1 or v > 0,
       "-1 (off) or a positive number of milliseconds", doc="interval of the CLI progress line"),
    _k("job.name", str, None, doc="the job name (the application's name by default)"),
    _k("job.id", str, None, doc="the job id (the application's app_id by default)"),
    _k("job.container.thread.pool.size", int, 0, *_NON_NEGATIVE,
       doc="threads for blocking user functions; 0 runs them on the loop"),
    _k("job.container.count", int, 1, *_POSITIVE, doc="container processes"),
    _k("job.container.id", int, None, *_NON_NEGATIVE, doc="this process's container"),
    _k("job.coordinator", str, None, lambda v: v in COORDINATORS, "kafka or static",
       doc="how a Kafka job's containers share its tasks: kafka (the default for a Kafka job "
       "run with --follow): every `samza-dsl run --follow` of the job joins the consumer group "
       "<job.name>-<job.id> and runs the tasks the group deals it, which move when containers "
       "come and go; static (the default otherwise, and for the local system and "
       "--containers N): task k runs in container k mod job.container.count"),
    _k("job.health.port", int, -1, lambda v: v >= -1, "-1 (off), 0 (a free port) or a port",
       doc="each container serves GET /healthz (its loop answers) and /ready (its tasks are "
       "assigned and restored) on this port, for a supervisor's liveness and readiness probes; "
       "container i of --containers N on port + i; -1: no health endpoint"),
    _k("job.health.host", str, "127.0.0.1", doc="the address the health endpoint listens on"),
    _k("job.health.liveness.ms", int, 30000, *_POSITIVE,
       doc="GET /healthz answers 503 once the container's event loop has made no progress (no "
       "turn of the loop, no message processed) for this long: a function blocked for good"),
    _k("query.enabled", bool, False,
       doc="each container answers interactive queries of its tasks' stores over HTTP: GET "
       "/query/<store>?key=K (or prefix=P, or from=A&to=B) with read=latest or committed "
       "(docs/queries.md); samza-dsl query asks it"),
    _k("query.host", str, "127.0.0.1",
       doc="the address the query endpoint listens on; another than a loopback address needs "
       "query.token"),
    _k("query.port", int, 0, *_NON_NEGATIVE,
       doc="the query endpoint's port (0: any free one; container i of --containers N on port + "
       "i); each container records its address where samza-dsl query finds it"),
    _k("query.token", str, None,
       doc="the token a query must bring (Authorization: Bearer TOKEN), required when query.host "
       "is not a loopback address: env:VAR, file:PATH or the token itself; never shown"),
    _k("job.standbytasks.replication.factor", int, 1, *_POSITIVE,
       doc="copies of each stateful task's stores under job.coordinator=kafka: the active one "
       "and R-1 standbys, each on another member, tailing the task's changelogs into a local "
       "store in its job.dir; a task that moves to its standby replays only the changelog's "
       "tail (1: no standby)"),
    _k("job.elasticity.factor", int, 1, *_POSITIVE, doc="virtual tasks per task"),
    _k("job.intermediate.stream.partitions", int, None,
       lambda v: v > 0, "a positive integer", doc="partitions of intermediate streams"),
    _k("job.default.system", str, None, doc="system for intermediate streams and changelogs"),
    _k("job.changelog.system", str, None, doc="system for changelogs"),
    _k("job.dir", str, None, doc="directory for local state, stores and the embedded log"),
    _k("job.kafka.unavailable.timeout.ms", int, 30000, lambda v: v >= 100,
       "at least 100 milliseconds",
       doc="how long a Kafka job retries while its brokers cannot be reached before it fails"),
    _k("job.kafka.partition.check.ms", int, 30000, lambda v: v >= 100,
       "at least 100 milliseconds",
       doc="how often a running Kafka job reads the partition counts of its topics (inputs, "
       "intermediate streams, outputs, changelogs); once one differs from the count its plan "
       "fixed at the start, the job commits what it processed and stops with an error naming "
       "the topic and both counts (partitions added to an input would never be read)"),
    _k("job.bounded.stall.ms", int, 300000, lambda v: v == -1 or v >= 100,
       "-1 (off) or at least 100 milliseconds",
       doc="a run without --follow that makes no progress (nothing read, handed out, completed "
       "or committed) for half this time logs what each task waits for (the partition, the "
       "offset it reads, where the run stops, a transaction's marker, upstream ends of stream, "
       "messages in flight); for all of it, it stops with an error that names them; -1: off"),
]}

_BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}


def _coerce(key: ConfigKey, value: Any) -> Any:
    if value is None:
        return None
    if key.kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
            return _BOOL_WORDS[value.strip().lower()]
        raise ConfigError(f"config {key.name}={value!r} is not a boolean: use true or false")
    if key.kind is int:
        if isinstance(value, bool):
            raise ConfigError(f"config {key.name}={value!r} is not an integer")
        if isinstance(value, int):
            out = value
        elif isinstance(value, str):
            try:
                out = int(value.strip())
            except ValueError:
                raise ConfigError(f"config {key.name}={value!r} is not an integer; it must be "
                                  f"{key.rule or 'an integer'}") from None
        elif isinstance(value, float) and value.is_integer():
            out = int(value)
        else:
            raise ConfigError(f"config {key.name}={value!r} is not an integer")
        if key.check is not None and not key.check(out):
            raise ConfigError(f"config {key.name}={value!r} is out of range: it must be {key.rule}")
        return out
    if key.check is not None:  # a choice among words
        text = str(value).strip().lower()
        if not key.check(text):
            raise ConfigError(f"config {key.name}={value!r} is not allowed: it must be "
                              f"{key.rule}")
        return text
    return str(value)


_RETENTION = (lambda v: v == -1 or v >= 0, "-1 (keep forever) or an integer >= 0")

#: What the runtime reads under ``streams.<stream id>.``: the property -> its key (the key's
#: name is the property).
STREAM_PROPERTIES: dict[str, ConfigKey] = {k.name: k for k in [
    _k("samza.serde.error", str, "fail", doc="what a record that fails to deserialize does: "
       + ", ".join(SERDE_ERROR_POLICIES)),
    _k("samza.system", str, None, doc="the stream's system"),
    _k("samza.physical.name", str, None, doc="the stream's name in its system"),
    _k("samza.intermediate", bool, False, doc="set by the planner for intermediate streams"),
    _k("samza.broadcast", bool, False, doc="set by the planner for broadcast streams"),
    _k("partitions", int, None, *_POSITIVE, doc="partition count"),
    _k("retention.ms", int, -1, *_RETENTION,
       doc="delete an input's or output's records older than this; -1 keeps them"),
    _k("retention.bytes", int, -1, *_RETENTION,
       doc="keep at most about this many bytes per partition; -1 keeps everything"),
]}

#: What the runtime reads under ``stores.<store name>.``.
STORE_PROPERTIES: dict[str, ConfigKey] = {k.name: k for k in [
    _k("changelog", str, None, doc="the changelog stream, [system.]stream"),
    _k("object.cache.size", int, 100_000, *_POSITIVE, doc="decoded values cached per task"),
    _k("write.batch.size", int, 10_000, *_POSITIVE, doc="dirty keys that trigger a flush"),
    _k("pane.cache.size", int, 10_000, *_POSITIVE,
       doc="a tumbling window's store: the panes it holds in memory per task (values, and keys "
           "of open panes); past it, the start holding the most panes keeps them in the store"),
    _k("changelog.compaction", bool, True,
       doc="compact the store's changelog on the local log in the background, below the "
           "checkpoint, to the latest entry of each key (false keeps every entry)"),
    _k("changelog.delete.retention.ms", int, 86_400_000, *_NON_NEGATIVE,
       doc="how long a compacted local changelog keeps a delete (tombstone) once compaction "
           "has passed it"),
]}

_SCOPES = {"streams.": ("stream", STREAM_PROPERTIES), "stores.": ("store", STORE_PROPERTIES)}


def _property(name: str) -> tuple[str, str, ConfigKey] | None:
    """(scope prefix, id, property) of a ``streams.``/``stores.`` key whose property is known;
    ids may hold dots, so the property is matched from the end."""
    for prefix, (_, props) in _SCOPES.items():
        if name.startswith(prefix):
            rest = name[len(prefix):]
            for prop, key in props.items():
                if rest.endswith("." + prop) and len(rest) > len(prop) + 1:
                    return prefix, rest[: -len(prop) - 1], key
    return None


def _check_prefixed(name: str, value: Any) -> Any:
    found = _property(name)
    if found is None:
        return value
    key = found[2]
    if key.name == "samza.serde.error":
        text = str(value).strip().lower()
        if text not in SERDE_ERROR_POLICIES:
            raise ConfigError(f"config {name}={value!r} must be one of "
                              f"{', '.join(SERDE_ERROR_POLICIES)}")
        return text
    if key.kind is not str:
        return _coerce(ConfigKey(name, key.kind, key.default, key.check, key.rule), value)
    return value


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to a mistyped ``word``, else ``""``: a
    config key, a system, a stream or a topic.

    >>> did_you_mean("page-veiws", ["page-views", "logins"]), did_you_mean("x", ["logins"])
    (" (did you mean 'page-views'?)", '')
    """
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


#: the values of a Kafka system's ``security.protocol`` and ``sasl.mechanism``
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: a Kafka system's properties that hold a secret (or ``env:VAR``, ``file:PATH`` naming one)
SECRET_PROPERTIES = ("sasl.password", "ssl.key.password")
_KAFKA_SECURITY = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password",
                   "ssl.cafile", "ssl.certfile", "ssl.keyfile", "ssl.key.password",
                   "ssl.check.hostname")

#: What the runtime reads under ``systems.<name>.`` of a system, by its factory (the Kafka
#: system's settings are given on ``KafkaSystem(...)``; ``consumer.*`` and ``producer.*`` are
#: aiokafka's own, passed through)
SYSTEM_PROPERTIES: dict[str, tuple[str, ...]] = {
    "local": ("samza.factory", "path", "log.max.bytes"),
    "kafka": ("samza.factory", "bootstrap.servers", "replication.factor", "min.insync.replicas",
              *_KAFKA_SECURITY, "consumer.*", "producer.*"),
    "memory": ("samza.factory",),
}


def check_system_keys(config: Mapping[str, Any], systems: Mapping[str, str]) -> None:
    """Every ``systems.<name>.<property>`` key names a system of the application (``systems``:
    name -> factory) and a property that system reads; anything else would be ignored, so it is
    an error with the closest name.

    >>> check_system_keys({"systems.locl.log.max.bytes": "1"}, {"local": "local"})
    Traceback (most recent call last):
    ...
    samza_dsl.errors.ConfigError: config key 'systems.locl.log.max.bytes' names system 'locl', which the application does not have (did you mean 'local'?)...
    """
    names = sorted(systems)
    for name in config:
        if not isinstance(name, str) or not name.startswith("systems."):
            continue
        rest = name[len("systems."):]
        owner = max((n for n in names if rest.startswith(n + ".")), key=len, default=None)
        if owner is None:
            wrong = rest.partition(".")[0]
            raise ConfigError(
                f"config key {name!r} names system {wrong!r}, which the application does not "
                f"have{did_you_mean(wrong, names)}. Its systems: {', '.join(names) or 'none'}")
        props = SYSTEM_PROPERTIES.get(systems[owner])
        if props is None:
            continue
        prop = rest[len(owner) + 1:]
        if prop == "samza.factory" and str(config[name]).strip() != systems[owner]:
            raise ConfigError(
                f"config {name}={config[name]!r}: system {owner!r} is a {systems[owner]} system, "
                f"as its descriptor says; the key may repeat that, not change it: build the "
                f"streams from another system's descriptor instead")
        if prop in props or any(p.endswith("*") and prop.startswith(p[:-1]) for p in props):
            continue
        raise ConfigError(
            f"unknown property {prop!r} of {systems[owner]} system {owner!r} in config key "
            f"{name!r}{did_you_mean(prop, props)}. Known properties: {', '.join(props)}")


def check_scoped_keys(config: Mapping[str, Any], *, streams: Iterable[str],
                      stores: Iterable[str]) -> None:
    """Every ``streams.<id>.<property>`` and ``stores.<name>.<property>`` key names a stream or
    store of the application and a property the runtime reads; anything else is a typo that
    would be ignored, so it is an error with the closest id or property.

    >>> check_scoped_keys({"streams.views.samza.serde.eror": "skip"}, streams=["views"],
    ...                   stores=[])
    Traceback (most recent call last):
    ...
    samza_dsl.errors.ConfigError: unknown property 'samza.serde.eror' of stream 'views' in config key 'streams.views.samza.serde.eror' (did you mean 'samza.serde.error'?)...
    """
    ids = {"streams.": sorted(set(streams)), "stores.": sorted(set(stores))}
    for name in config:
        if not isinstance(name, str):
            continue
        for prefix, (what, props) in _SCOPES.items():
            if not name.startswith(prefix):
                continue
            known = ids[prefix]
            found = _property(name)
            if found is not None and found[1] in known:
                break
            rest = name[len(prefix):]
            # the longest known id the key starts with: then the property is what is wrong
            owner = max((i for i in known if rest.startswith(i + ".")), key=len, default=None)
            if owner is not None:
                prop = rest[len(owner) + 1:]
                raise ConfigError(
                    f"unknown property {prop!r} of {what} {owner!r} in config key {name!r}"
                    f"{did_you_mean(prop, props)}. Known {what} properties: "
                    f"{', '.join(sorted(props))}")
            wrong = found[1] if found is not None else rest.partition(".")[0]
            raise ConfigError(
                f"config key {name!r} names {what} {wrong!r}, which the application does not "
                f"have{did_you_mean(wrong, known)}. Its {what}s: {', '.join(known) or 'none'}")


#: The prefix of a user's own keys: Samza leaves keys it does not know alone, but here a key
#: nothing reads is most often a typo, so only keys under this prefix go unchecked.
USER_PREFIX = "user."

#: Namespaces whose keys name a stream, store or system: their ids are checked by the planner,
#: which knows the application's (``check_scoped_keys``, ``check_system_keys``).
_SCOPED_PREFIXES = ("streams.", "stores.", "systems.")

_NAMESPACES = sorted({k.split(".", 1)[0] for k in KNOWN_KEYS}
                     | {p[:-1] for p in (*_SCOPED_PREFIXES, USER_PREFIX)})


def _unknown_key(name: str) -> ConfigError:
    """The error of a key no part of the job reads, with the closest key it may have meant."""
    head, dot, rest = name.partition(".")
    close = difflib.get_close_matches(head, _NAMESPACES, n=1, cutoff=0.7) if dot else []
    if close and close[0] != head:  # a misspelt namespace: the same key under the right one
        hint = f" (did you mean {close[0] + dot + rest!r}?)"
    else:
        hint = did_you_mean(name, KNOWN_KEYS)
    return ConfigError(
        f"unknown config key {name!r}{hint}: nothing reads it. Keys are those of "
        f"samza_dsl.config.KNOWN_KEYS (task.*, job.*, metrics.*), streams.<id>.*, "
        f"stores.<name>.* and systems.<name>.*; put keys of your own under {USER_PREFIX}*")


def check_job_name(name: Any, job_id: Any) -> str:
    """``<name>-<job_id>``, once both are made of the characters a job's streams and
    ``job.dir`` may be named with."""
    for key, value in (("job.name", name), ("job.id", job_id)):
        if not _JOB_NAME.match(str(value)):
            raise ConfigError(f"config {key}={value!r}: a job's name and id are made of letters, "
                              f"digits, '_', '.' and '-' (they name its streams and job.dir)")
    return f"{name}-{job_id}"


def validate_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check keys and values; return a copy with known values converted to their types.

    A key must be known (``KNOWN_KEYS``), under ``streams.``, ``stores.`` or ``systems.`` (the
    values of known ``streams.<id>.`` and ``stores.<name>.`` properties are checked and
    converted; the planner checks the ids: ``check_scoped_keys``, ``check_system_keys``), or a
    user's own under ``user.`` (passed through); anything else is a ``ConfigError``.

    >>> validate_config({"strems.events.retention.ms": 5})
    Traceback (most recent call last):
    ...
    samza_dsl.errors.ConfigError: unknown config key 'strems.events.retention.ms' (did you mean 'streams.events.retention.ms'?)...
    >>> validate_config({"user.greeting": "hi"})
    {'user.greeting': 'hi'}
    """
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise ConfigError(f"config must be a mapping of key -> value, got {type(config).__name__}")
    out: dict[str, Any] = {}
    for name, value in config.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"config keys are non-empty strings, got {name!r}")
        key = KNOWN_KEYS.get(name)
        if key is not None:
            out[name] = _coerce(key, value)
        elif name.startswith(_SCOPED_PREFIXES):
            out[name] = _check_prefixed(name, value)
        elif name.startswith(USER_PREFIX) and len(name) > len(USER_PREFIX):
            out[name] = value
        else:
            raise _unknown_key(name)
    return out


def exactly_once(config: Mapping[str, Any]) -> bool:
    """Whether a validated config asks for ``job.processing.guarantee=exactly-once``."""
    return bool(config_value(config, "job.processing.guarantee") == EXACTLY_ONCE)


def check_guarantee(config: Mapping[str, Any]) -> None:
    """Settings that cannot go with the job's processing guarantee: under exactly-once a commit
    writes exactly the outputs of the messages its checkpoint covers, so it cannot run while
    messages are in flight (``task.async.commit``).

    >>> check_guarantee({"job.processing.guarantee": "exactly-once", "task.async.commit": True})
    Traceback (most recent call last):
    ...
    samza_dsl.errors.ConfigError: config task.async.commit=true cannot go with job.processing.guarantee=exactly-once...
    """
    if exactly_once(config) and config_value(config, "task.async.commit"):
        raise ConfigError(
            "config task.async.commit=true cannot go with job.processing.guarantee=exactly-once: "
            "an exactly-once commit holds exactly the outputs of the messages its checkpoint "
            "covers, so it runs only when no message is in flight. Remove task.async.commit, or "
            "set job.processing.guarantee=at-least-once")


def config_value(config: Mapping[str, Any], name: str) -> Any:
    """A known key's value from a validated config, or its default."""
    value = config.get(name)
    return KNOWN_KEYS[name].default if value is None else value



@dataclass(frozen=True)
class KeyReference:
    """One row of the configuration reference: a key (``<id>``, ``<name>`` stand for a stream,
    store or system of the application), its type, its default and what it does."""

    key: str
    type: str
    default: str
    meaning: str


def _reference_row(key: str, spec: ConfigKey) -> KeyReference:
    meaning = spec.doc + (f"; must be {spec.rule}" if spec.rule else "")
    if spec.default is None:
        default = "(none)"
    elif isinstance(spec.default, bool):
        default = str(spec.default).lower()
    else:
        default = repr(spec.default)
    return KeyReference(key, spec.kind.__name__, default, meaning)


#: What each ``systems.<name>.`` property of ``SYSTEM_PROPERTIES`` does: (type, default, meaning)
_SYSTEM_REFERENCE: dict[str, tuple[str, str, str]] = {
    "samza.factory": ("str", "(none)", "the system's kind: local, kafka or memory (set from its "
                      "descriptor)"),
    "path": ("str", "(none)", "a local system's log directory (default: in job.dir)"),
    "log.max.bytes": ("int", str(1 << 36), "a local system's log size cap in bytes (>= 1 MiB)"),
    "bootstrap.servers": ("str", "(none)", "a Kafka system's brokers, host:port[,host:port...] "
                          "(set from KafkaSystem(bootstrap_servers=...))"),
    "replication.factor": ("int", "(none)", "replicas of each topic a Kafka job creates (its "
                           "intermediate streams, changelogs, checkpoints, dead letters, "
                           "outputs); default min(3, the cluster's brokers)"),
    "min.insync.replicas": ("int", "(none)", "min.insync.replicas of each topic a Kafka job "
                            "creates; default min(2, replication.factor) where it is above 1, "
                            "so that an acknowledged write (acks=all) is on two brokers"),
    "security.protocol": ("str", "'PLAINTEXT'", "how a Kafka system's clients (consumers, "
                          "producers, the admin client, Spark's readers) speak to its brokers: "
                          + ", ".join(SECURITY_PROTOCOLS)),
    "sasl.mechanism": ("str", "'SCRAM-SHA-512'", "the SASL mechanism of a SASL_* protocol: "
                       + ", ".join(SASL_MECHANISMS)),
    "sasl.username": ("str", "(none)", "the SASL user of a SASL_* protocol"),
    "sasl.password": ("str", "(none)", "the SASL user's password: env:VAR (an environment "
                      "variable), file:PATH (a file's text, as a mounted Secret) or the password "
                      "itself; never shown (samza-dsl config and the plan show *** or the "
                      "reference)"),
    "ssl.cafile": ("str", "(none)", "a PEM file of the CA that signed the brokers' "
                   "certificates (SSL, SASL_SSL); default: the machine's CAs"),
    "ssl.certfile": ("str", "(none)", "the client's own PEM certificate, for brokers that ask "
                     "for one (ssl.client.auth)"),
    "ssl.keyfile": ("str", "(none)", "the PEM key of ssl.certfile (when not in that file)"),
    "ssl.key.password": ("str", "(none)", "the password of an encrypted ssl.keyfile: env:VAR, "
                         "file:PATH or the password itself; never shown"),
    "ssl.check.hostname": ("bool", "true", "whether the broker's certificate must name the "
                           "host the client connects to"),
    "consumer.*": ("any", "(none)", "an aiokafka AIOKafkaConsumer keyword argument of a Kafka "
                   "system, as given on KafkaSystem(consumer={...})"),
    "producer.*": ("any", "(none)", "an aiokafka AIOKafkaProducer keyword argument of a Kafka "
                   "system, as given on KafkaSystem(producer={...})"),
}


def key_reference() -> list[KeyReference]:
    """Every configuration key the job reads, as ``samza-dsl config`` and the docs list them:
    the job's own keys, then the properties of a stream, of a store and of a system, then
    ``user.*``.

    >>> rows = {r.key: r for r in key_reference()}
    >>> rows["task.max.concurrency"]
    KeyReference(key='task.max.concurrency', type='int', default='1', meaning='messages in flight per task; must be an integer >= 1')
    >>> rows["streams.<id>.samza.serde.error"].default
    "'fail'"
    """
    rows = [_reference_row(name, KNOWN_KEYS[name]) for name in sorted(KNOWN_KEYS)]
    rows += [_reference_row(f"streams.<id>.{p}", k) for p, k in sorted(STREAM_PROPERTIES.items())]
    rows += [_reference_row(f"stores.<name>.{p}", k) for p, k in sorted(STORE_PROPERTIES.items())]
    props = dict.fromkeys(p for ps in SYSTEM_PROPERTIES.values() for p in ps)
    for prop in props:
        kind, default, meaning = _SYSTEM_REFERENCE.get(prop, ("str", "(none)", ""))
        rows.append(KeyReference(f"systems.<name>.{prop}", kind, default, meaning))
    rows.append(KeyReference(f"{USER_PREFIX}*", "any", "(none)",
                             "your own keys, passed through unchecked, for your functions to "
                             "read from ctx.config"))
    return rows


def is_secret(key: str) -> bool:
    """Whether config key ``key`` holds a secret that is never shown: a system's
    ``sasl.password`` or ``ssl.key.password``, or a client setting of a system whose name says
    password (``systems.<name>.consumer.sasl_plain_password``).

    >>> is_secret("systems.kafka.sasl.password"), is_secret("systems.kafka.sasl.username")
    (True, False)
    """
    if key == "query.token":
        return True
    if not key.startswith("systems."):
        return False
    return key.endswith(tuple("." + p for p in SECRET_PROPERTIES)) or (
        ".consumer." in key or ".producer." in key) and "password" in key.lower()


def shown_value(key: str, value: Any) -> Any:
    """``value`` as it may be shown (``samza-dsl config``, a plan's renderings, messages): a
    secret's reference (``env:VAR``, ``file:PATH``) as it is, the secret itself as ``***``.

    >>> shown_value("systems.kafka.sasl.password", "hunter2")
    '***'
    >>> shown_value("systems.kafka.sasl.password", "env:KAFKA_PASSWORD")
    'env:KAFKA_PASSWORD'
    """
    if not is_secret(key) or value is None:
        return value
    text = str(value)
    return text if text.startswith(("env:", "file:")) else "***"


def shown_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config with every secret as ``shown_value`` shows it."""
    return {k: shown_value(k, v) for k, v in config.items()}


#: a password in a libpq keyword string: ``password=...`` (quoted, or up to the next ``key=``)
_KEYWORD_SECRET = re.compile(r"(?:^|\s)(?:ssl)?password\s*=\s*(?:'((?:[^'\\]|\\.)*)'?|"
                             r"(.*?)(?=\s+[A-Za-z_]+\s*=|\s*$))", re.S)
#: a password in a URL's query (``?password=...``, ``&sslpassword=...``)
_QUERY_SECRET = re.compile(r"[?&](?:ssl)?password=([^&#]*)")
#: what a secret is cut into (whitespace, percent escapes and stray percent signs)
_SPLIT = re.compile(r"\s+|%[0-9A-Fa-f]{2}|%")


def connection_secrets(conninfo: str) -> list[str]:
    """The passwords a connection string holds, read leniently so that a string its driver
    cannot parse still gives them: a libpq ``password=`` (quoted, or up to the next ``key=``),
    a URL's ``user:password@`` (any scheme: ``postgresql://``, SQLAlchemy's
    ``postgresql+psycopg://``) and its query's ``password=``.

    >>> connection_secrets("host=db user=app password=Wr0ng PW_charlie")
    ['Wr0ng PW_charlie']
    >>> connection_secrets("postgresql://app:Wr0ng%ZZPW_delta@db/shop")
    ['Wr0ng%ZZPW_delta']
    """
    found: list[str] = []
    scheme, sep, rest = conninfo.partition("://")
    if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        userinfo, at, _ = rest.rpartition("@")
        if at and ":" in userinfo:
            found.append(userinfo.partition(":")[2])
        found += _QUERY_SECRET.findall(rest)
    else:
        for quoted, plain in _KEYWORD_SECRET.findall(conninfo):
            found.append(re.sub(r"\\(.)", r"\1", quoted) if quoted else plain.strip())
    return [f for f in found if f]


def secret_fragments(secret: str) -> list[str]:
    """What of ``secret`` no text may show, longest first: the secret, its percent-decoded and
    percent-encoded forms, and each piece of them of 3 characters or more cut at whitespace
    and percent escapes (a driver quotes the piece of a password it could not parse).

    >>> secret_fragments("Wr0ng PW_charlie")
    ['Wr0ng%20PW_charlie', 'Wr0ng PW_charlie', 'Wr0ng+PW_charlie', 'PW_charlie', 'Wr0ng']
    """
    decoded = urllib.parse.unquote(secret)
    forms = {secret, decoded, *(encode(form, safe="") for form in (secret, decoded)
                                for encode in (urllib.parse.quote, urllib.parse.quote_plus))}
    pieces = set(forms)
    for form in forms:
        pieces.update(p for p in _SPLIT.split(form) if len(p) >= 3)
    return sorted((p for p in pieces if p), key=lambda p: (-len(p), p))


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every fragment of each secret (``secret_fragments``) as ``***``: what an
    error or a log line made of a driver's message shows, whatever the driver put in it.

    >>> redact('missing "=" after "PW_charlie" in connection info string',
    ...        ["Wr0ng PW_charlie"])
    'missing "=" after "***" in connection info string'
    """
    fragments = sorted({f for s in secrets if s for f in secret_fragments(s)},
                       key=lambda p: (-len(p), p))
    for fragment in fragments:
        text = text.replace(fragment, "***")
    return text


def secret_value(key: str, value: Any) -> str:
    """The secret ``value`` of config key ``key`` gives: as given, or read from ``env:VAR``
    or ``file:PATH``. Errors name the key and the reference, never a secret."""
    text = str(value)
    if text.startswith("env:"):
        var = text[4:].strip()
        found = os.environ.get(var)
        if not var or found is None:
            raise ConfigError(f"config {key}=env:{var}: the environment variable {var!r} is not "
                              f"set in this process; set it, or give file:PATH")
        return found
    if text.startswith("file:"):
        path = text[5:].strip()
        try:
            with open(path, encoding="utf-8") as f:
                found = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise ConfigError(f"config {key}=file:{path}: it cannot be read ({why}); give a file "
                              f"that holds the secret alone") from None
        return found.rstrip("\r\n")
    return text
