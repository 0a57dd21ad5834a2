"""Who owns each stream a job writes: one role per stream name in a system.

A job writes its outputs, intermediate and broadcast streams, late streams, store changelogs,
its checkpoint stream, its dead letters and (with the ``snapshot`` reporter) its metrics. Each of
these names must belong to that role alone, and none may be a stream the job reads: a changelog
named after an input would feed the job its own state; two stores on one changelog would restore
each other's values; a changelog among the outputs would put store entries among the results.
``check_owners`` refuses any such clash at plan time, naming both roles.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from samza_dsl.errors import ConfigError
from samza_dsl.jobconfig import JobConfig

from .model import StoreSpec, StreamSpec

__all__ = ["changelog_setting", "check_owners", "checkpoint_stream", "dead_letter_stream",
           "metrics_stream", "qualified_changelog"]

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0", "none", "null", ""}


def dead_letter_stream(job_name: str) -> str:
    """The stream that takes the records a ``dead-letter`` serde error policy passes over."""
    return f"{job_name}-dead-letter"


def metrics_stream(job_name: str) -> str:
    """The stream the ``snapshot`` metrics reporter writes (``runtime.host.reporters``)."""
    return f"{job_name}-metrics"


def checkpoint_stream(job_name: str) -> str:
    """The stream a job on Kafka keeps its checkpoints in."""
    return f"__samza_checkpoint_{job_name}"


def changelog_setting(store: str, value: Any) -> bool | str | None:
    """What ``stores.<store>.changelog`` says: None (not given), True (a changelog of the
    default name), False (no changelog) or the ``[system.]stream`` it names.

    >>> [changelog_setting("s", v) for v in (None, "false", False, "on", " kafka.c ")]
    [None, False, False, True, 'kafka.c']
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip()
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    if text.startswith(".") or text.endswith("."):
        raise ConfigError(f"config stores.{store}.changelog={value!r} is not a stream: give "
                          f"[system.]stream, true (the default name) or false (no changelog)")
    return text


def qualified_changelog(name: str, systems: Iterable[str], default: str | None) -> str:
    """``name`` as ``system.stream``: its first part when that is a system of the job, else the
    whole of it on ``default`` (the changelog system); as given where no system is known."""
    first, _, rest = name.partition(".")
    if rest and first in set(systems):
        return name
    return f"{default}.{name}" if default is not None else name


def _written_by_job(job_name: str, config: JobConfig) -> list[str]:
    names = [checkpoint_stream(job_name), dead_letter_stream(job_name)]
    reporters = config.metrics.reporters
    if "snapshot" in [r.strip() for r in reporters.split(",")]:
        names.append(metrics_stream(job_name))
    return names


def check_owners(job_name: str, streams: Mapping[str, StreamSpec],
                 stores: Mapping[str, StoreSpec], config: JobConfig,
                 default_system: str | None) -> None:
    """Every stream name the job writes belongs to one role, and is no stream it reads; a clash
    is a ConfigError naming both roles and the keys that set them."""
    owner: dict[tuple[str | None, str], str] = {}
    read: dict[tuple[str | None, str], str] = {}

    def claim(system: str | None, name: str, role: str) -> None:
        where = (system, name)
        other = owner.get(where) or read.get(where)
        if other is not None:
            shown = f"{system}.{name}" if system else name
            raise ConfigError(
                f"stream {shown!r} is both {other} and {role}: every stream a job writes "
                f"belongs to one role (input, output, intermediate, changelog, checkpoint, dead "
                f"letters, metrics). Give one of them another name (stores.<store>.changelog, "
                f"streams.<id>.samza.physical.name, or the descriptor's stream name)")
        owner[where] = role

    for sid, s in streams.items():
        if s.kind == "input":
            read.setdefault((s.system, s.physical_name), f"the input stream {sid!r}")
    for sid, s in streams.items():  # one id as input and output is one stream, listed once
        if s.kind == "input":
            continue
        role = {"output": "the output stream", "broadcast": "the broadcast stream"}.get(
            s.kind, "the intermediate stream")
        claim(s.system, s.physical_name, f"{role} {sid!r}")
    for name, store in stores.items():
        if store.changelog_stream is None:
            continue
        claim(store.changelog_system, store.changelog_stream,
              f"the changelog of store {name!r} (stores.{name}.changelog)")
    for name in _written_by_job(job_name, config):
        claim(default_system, name, f"the job's own stream {name!r}")
