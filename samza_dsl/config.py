"""Configuration keys, with Samza's names and defaults, and their validation.

Unknown ``task.``/``job.`` keys are an error that names the key (and the closest known key).

>>> validate_config({"task.max.concurrency": "16"})["task.max.concurrency"]
16
>>> validate_config({"task.max.concurency": 4})
Traceback (most recent call last):
...
samza_dsl.errors.ConfigError: unknown config key 'task.max.concurency' (did you mean 'task.max.concurrency'?)...
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = ["ConfigKey", "KNOWN_KEYS", "validate_config", "config_value", "SERDE_ERROR_POLICIES"]

SERDE_ERROR_POLICIES = ("fail", "skip", "dead-letter")


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


_POSITIVE = (lambda v: v >= 1, "an integer >= 1")
_NON_NEGATIVE = (lambda v: v >= 0, "an integer >= 0")
_TIMEOUT = (lambda v: v == -1 or v > 0, "-1 (off) or a positive number of milliseconds")

KNOWN_KEYS: dict[str, ConfigKey] = {k.name: k for k in [
    _k("task.max.concurrency", int, 1, *_POSITIVE, doc="messages in flight per task"),
    _k("task.callback.timeout.ms", int, -1, *_TIMEOUT,
       doc="fail a task whose message has not completed in this time; -1 is off"),
    _k("task.commit.ms", int, 60000, lambda v: v == -1 or v > 0,
       "-1 (only at end) or a positive number of milliseconds", doc="commit interval"),
    _k("task.window.ms", int, -1, lambda v: v == -1 or v > 0,
       "-1 (off) or a positive number of milliseconds", doc="window timer interval"),
    _k("task.async.commit", bool, False, doc="allow commits while messages are in flight"),
    _k("task.checkpoint.system", str, None, doc="system that stores checkpoints"),
    _k("task.shutdown.ms", int, 30000, *_POSITIVE, doc="time allowed for a clean shutdown"),
    _k("task.progress.ms", int, 1000, lambda v: v == -1 or v > 0,
       "-1 (off) or a positive number of milliseconds", doc="interval of the CLI progress line"),
    _k("job.name", str, None, doc="the job name (the application's name by default)"),
    _k("job.id", str, None, doc="the job id (the application's app_id by default)"),
    _k("job.container.thread.pool.size", int, 0, *_NON_NEGATIVE,
       doc="threads for blocking user functions; 0 runs them on the loop"),
    _k("job.container.count", int, 1, *_POSITIVE, doc="container processes"),
    _k("job.container.id", int, None, *_NON_NEGATIVE, doc="this process's container"),
    _k("job.elasticity.factor", int, 1, *_POSITIVE, doc="virtual tasks per task"),
    _k("job.intermediate.stream.partitions", int, None,
       lambda v: v > 0, "a positive integer", doc="partitions of intermediate streams"),
    _k("job.default.system", str, None, doc="system for intermediate streams and changelogs"),
    _k("job.changelog.system", str, None, doc="system for changelogs"),
    _k("job.dir", str, None, doc="directory for local state, stores and the embedded log"),
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
    return str(value)


def _check_prefixed(name: str, value: Any) -> Any:
    if name.startswith("streams.") and name.endswith(".samza.serde.error"):
        text = str(value).strip().lower()
        if text not in SERDE_ERROR_POLICIES:
            raise ConfigError(f"config {name}={value!r} must be one of "
                              f"{', '.join(SERDE_ERROR_POLICIES)}")
        return text
    return value


def validate_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check keys and values; return a copy with known values converted to their types.

    Keys under ``task.`` and ``job.`` must be known; ``stores.``, ``streams.``, ``systems.`` and
    every other prefix are passed through (the runtime checks those it reads)."""
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
        elif name.startswith(("task.", "job.")):
            close = difflib.get_close_matches(name, KNOWN_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown config key {name!r}{hint}. Known task./job. keys: "
                              f"{', '.join(sorted(KNOWN_KEYS))}")
        else:
            out[name] = _check_prefixed(name, value)
    return out


def config_value(config: Mapping[str, Any], name: str) -> Any:
    """A known key's value from a validated config, or its default."""
    value = config.get(name)
    return KNOWN_KEYS[name].default if value is None else value
