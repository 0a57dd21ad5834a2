"""``samza-dsl --version``, a description on every subcommand, and ``samza-dsl config [KEY]``,
which lists the configuration keys of ``samza_dsl/config.py`` with their defaults and meanings."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

import samza_dsl
from runtime.ops.cli import build_parser, main
from samza_dsl.config import KNOWN_KEYS, STORE_PROPERTIES, STREAM_PROPERTIES

ROOT = Path(__file__).resolve().parents[2]


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_version_prints_the_package_version_from_the_console_script() -> None:
    proc = subprocess.run([sys.executable, "-m", "runtime.ops.cli", "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"samza-dsl {samza_dsl.__version__}"


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_subcommand_has_a_description(name: str) -> None:
    sub = _subcommands()[name]
    assert sub.description, f"samza-dsl {name} --help has no description"
    assert sub.description.endswith(".") and len(sub.description) > 40
    assert sub.format_help().count(sub.description.split()[0]) >= 1


def _entries(out: str) -> dict[str, str]:
    """``samza-dsl config``'s entries: a key's line, then its meaning wrapped and indented,
    as the key's line and its meaning in one line of single spaces."""
    entries: dict[str, str] = {}
    key = ""
    for line in out.splitlines():
        if line.startswith(" "):
            entries[key] += " " + line.strip()
        else:
            key = line.split()[0]
            entries[key] = line + " |"
    return entries


def test_config_lists_every_key_with_its_default_and_meaning(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100, "a line wider than 100"
    lines = _entries(out)
    for name, key in KNOWN_KEYS.items():
        assert name in lines, f"{name} is not listed"
        assert " ".join(key.doc.split()) in lines[name]
    assert "default 1 |" in lines["task.max.concurrency"]
    assert "default 60000 |" in lines["task.commit.ms"]
    for prop in STREAM_PROPERTIES:
        assert f"streams.<id>.{prop}" in lines
    for prop in STORE_PROPERTIES:
        assert f"stores.<name>.{prop}" in lines
    assert "user.*" in lines and "systems.<name>.consumer.*" in lines


def test_config_key_shows_that_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "task.max.concurrency"]) == 0
    entries = _entries(capsys.readouterr().out)
    assert list(entries) == ["task.max.concurrency"]
    assert "default 1 | messages in flight per task" in entries["task.max.concurrency"]


def test_a_streams_key_matches_its_property(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "streams.page-views.samza.serde.error"]) == 0
    entries = _entries(capsys.readouterr().out)
    assert list(entries) == ["streams.<id>.samza.serde.error"]
    assert "fail, skip, dead-letter" in entries["streams.<id>.samza.serde.error"]


def test_a_prefix_lists_its_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "metrics."]) == 0
    keys = list(_entries(capsys.readouterr().out))
    assert keys == sorted(k for k in KNOWN_KEYS if k.startswith("metrics."))


def test_an_unknown_key_is_one_line_with_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "task.max.concurency"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "'task.max.concurency'" in err and "did you mean 'task.max.concurrency'" in err
