"""``samza-dsl run`` with a store's changelog on a stream of another role stops before it reads
anything, with one line naming both roles; ``stores.<store>.changelog=false`` runs the job with
no changelog stream at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.local.log import LocalLog

ROOT = Path(__file__).resolve().parents[2]
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
COUNTER = str(ROOT / "examples" / "readwrite_counter.py") + ":app"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def load(tmp_path: Path, n: int) -> None:
    events = tmp_path / "e.jsonl"
    events.write_text("".join(json.dumps({"key": str(i % 4), "value": {"id": i % 4}}) + "\n"
                              for i in range(n)))
    assert cli("load", COUNTER, "events", str(events), cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("stream, role", [("events", "the input stream 'events'"),
                                          ("counts", "the output stream 'counts'")])
def test_a_changelog_on_the_jobs_own_stream_is_refused_before_anything_runs(
        tmp_path: Path, stream: str, role: str) -> None:
    load(tmp_path, 10)
    run = cli("run", COUNTER, "-q", "-c", f"stores.counts.changelog={stream}", cwd=tmp_path)
    assert run.returncode != 0
    assert role in run.stderr and "the changelog of store 'counts'" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    with LocalLog(tmp_path / ".samza" / "readwrite-counter-1" / "logs" / "local") as log:
        assert log.end_offset("events", 0) + log.end_offset("events", 1) + \
            log.end_offset("events", 2) + log.end_offset("events", 3) == 10  # fed nothing back
        assert (log.partitions("counts") or 0) == 0 or all(
            log.end_offset("counts", p) == 0 for p in range(log.partitions("counts") or 0))


def test_changelog_false_runs_without_a_changelog(tmp_path: Path) -> None:
    load(tmp_path, 12)
    run = cli("run", COUNTER, "-q", "-c", "stores.counts.changelog=false", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    with LocalLog(tmp_path / ".samza" / "readwrite-counter-1" / "logs" / "local") as log:
        streams = log.streams()
    assert not [s for s in streams if "changelog" in s or s == "false"], streams
    out = cli("dump", COUNTER, "counts", cwd=tmp_path)
    finals: dict[str, int] = {}
    for line in out.stdout.splitlines():
        entry = json.loads(line)
        finals[entry["key"]] = entry["value"]
    assert finals == {"0": 3, "1": 3, "2": 3, "3": 3}
