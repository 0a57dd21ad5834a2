"""The end of a bounded run closes every open pane of an event-time window, and event time is
complete up to the last of them: more input at those times, loaded and run after, is late
(counted, and said why in the summary), never a pane emitted a second time. Input past that point
opens new panes as ever. docs/semantics.md, 'The end of a bounded run'."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
APP = str(HERE / "ended_app.py") + ":app"
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")


def cli(*args: str, cwd: Path, kind: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SAMZA_ENDED_WINDOW": kind})


def load(cwd: Path, kind: str, events: list[tuple[str, float]], name: str) -> None:
    path = cwd / name
    path.write_text("".join(json.dumps({"k": k, "t": t}) + "\n" for k, t in events))
    done = cli("load", APP, "events", str(path), cwd=cwd, kind=kind)
    assert done.returncode == 0, done.stderr


def emitted(cwd: Path, kind: str) -> list[str]:
    done = cli("dump", APP, "counts", cwd=cwd, kind=kind)
    assert done.returncode == 0, done.stderr
    return [json.loads(line)["key"] for line in done.stdout.splitlines()]


@pytest.mark.parametrize("kind", ["tumbling", "hopping", "session"])
def test_more_input_for_panes_a_run_closed_is_late_and_never_emits_them_twice(
        tmp_path: Path, kind: str) -> None:
    load(tmp_path, kind, [("a", 1.0), ("b", 2.0), ("a", 3.0), ("b", 12.0)], "first.jsonl")
    first = cli("run", APP, "--show", "0", cwd=tmp_path, kind=kind)
    assert first.returncode == 0, first.stderr
    assert "late: no late messages" in first.stdout
    before = emitted(tmp_path, kind)
    assert before and len(before) == len(set(before)), before

    # the same times again (all closed by the first run's end), then one well past them
    load(tmp_path, kind, [("a", 2.5), ("b", 12.5), ("c", 4.0), ("a", 100.0)], "more.jsonl")
    second = cli("run", APP, "--show", "0", cwd=tmp_path, kind=kind)
    assert second.returncode == 0, second.stderr
    after = emitted(tmp_path, kind)
    new = after[len(before):]
    assert len(after) == len(set(after)), f"a pane came out twice: {after}"
    assert new and all(key.startswith("a@") for key in new), new  # only the panes at 100 s
    assert "late: 3 message(s) dropped" in second.stdout, second.stdout
    assert "3 of them came for panes that the end of an earlier bounded run had closed" \
        in second.stdout, second.stdout
    assert "reset" in second.stdout and "most likely replays" not in second.stdout


def test_a_restart_before_the_end_keeps_panes_open(tmp_path: Path) -> None:
    """Only the end of the input closes panes: a run stopped before it (a SIGINT, a crash) keeps
    them open, and the next run completes them, each emitted once."""
    load(tmp_path, "tumbling", [("a", 1.0), ("a", 2.0)], "first.jsonl")
    done = cli("run", APP, "--show", "0", cwd=tmp_path, kind="tumbling")
    assert done.returncode == 0, done.stderr
    load(tmp_path, "tumbling", [("a", 30.0)], "more.jsonl")
    done = cli("run", APP, "--show", "0", cwd=tmp_path, kind="tumbling")
    assert done.returncode == 0 and "late: no late messages" in done.stdout, done.stdout
    assert emitted(tmp_path, "tumbling") == ["a@0", "a@30000"]
