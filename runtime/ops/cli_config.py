"""How the command line becomes a config: each ``--config-file`` (``KEY=VALUE`` lines, as
Samza's ``.properties``) in order, then each ``-c KEY=VALUE``, a later one winning, and the
flags that stand for keys (``--containers``, ``--container-id``, ``--partitions``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from samza_dsl.errors import SamzaError

__all__ = ["cli_config", "config_file", "parse_config", "partition_counts"]


def parse_config(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SamzaError(f"-c takes KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def config_file(path: str) -> dict[str, str]:
    """A file of ``KEY=VALUE`` (or ``KEY: VALUE``) lines, as Samza's ``.properties``; blank
    lines and lines starting with ``#`` or ``!`` are skipped."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise SamzaError(f"--config-file {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise SamzaError(f"--config-file {path}: not UTF-8 text") from None
    out: dict[str, str] = {}
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut < 0:
            raise SamzaError(f"--config-file {path}:{lineno}: {raw!r} is not KEY=VALUE")
        out[line[:cut].strip()] = line[cut + 1:].strip()
    return out


def cli_config(args: argparse.Namespace) -> dict[str, str]:
    """The run's config from the command line: each ``--config-file`` in order, then each
    ``-c``; a later one wins. The application's own config is under both (``job_config``)."""
    out: dict[str, str] = {}
    for path in getattr(args, "config_file", None) or []:  # foreign: argparse's Namespace
        out.update(config_file(path))
    out.update(parse_config(args.config))
    if getattr(args, "containers", None) is not None:  # foreign: argparse's Namespace
        out["job.container.count"] = str(args.containers)
    if getattr(args, "container_id", None) is not None:  # foreign: argparse's Namespace
        out["job.container.id"] = str(args.container_id)
    return out


def partition_counts(pairs: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SamzaError(f"--partitions takes STREAM=COUNT, got {pair!r}")
        try:
            out[key.strip()] = int(value)
        except ValueError:
            raise SamzaError(f"--partitions takes STREAM=COUNT with a whole number COUNT, got "
                             f"{pair!r}") from None
    return out
