"""A new user's first hour with ``samza-dsl run``, through the real console script: a resumed run
says so, and input options never silently do nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "samza-dsl")
VIEWS = str(ROOT / "examples" / "reprocess_page_views.py") + ":app"
COUNTER = str(ROOT / "examples" / "readwrite_counter.py") + ":app"


def cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "100"})


def ok(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = cli(*args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc


def count(stdout: str, stream: str) -> int:
    line = next(ln for ln in stdout.splitlines() if ln.startswith(f"{stream}: "))
    return int(line.split()[1])


# -- 4. a resumed run says so ----------------------------------------------------------------------

def test_a_resumed_run_names_its_checkpoint_and_what_was_new(tmp_path: Path) -> None:
    first = ok("run", VIEWS, "--sample", "500", "-q", cwd=tmp_path)
    assert "resumed" not in first.stdout
    assert "in: 500 new message(s) (500 from page-views)" in first.stdout

    again = ok("run", VIEWS, "-q", cwd=tmp_path)
    lines = again.stdout.splitlines()
    resumed = next(ln for ln in lines if ln.startswith("resumed after the checkpoint"))
    for p in range(4):  # the offset of each input partition it resumed after
        assert f"page-views[{p}]@" in resumed
    assert "in: 0 new message(s)" in again.stdout
    hint = next(ln for ln in lines if ln.startswith("nothing new"))
    assert f"samza-dsl dump {VIEWS} page-views" in hint and f"samza-dsl reset {VIEWS}" in hint

    # new messages: counted as new, after the same kind of line
    (tmp_path / "more.jsonl").write_text(ok("sample", VIEWS, "page-views", "30", cwd=tmp_path)
                                         .stdout)
    ok("load", VIEWS, "page-views", "more.jsonl", cwd=tmp_path)
    third = ok("run", VIEWS, "-q", cwd=tmp_path)
    assert "resumed after the checkpoint" in third.stdout
    assert "in: 30 new message(s) (30 from page-views)" in third.stdout
    assert "nothing new" not in third.stdout


def test_the_progress_line_counts_user_messages_not_control_records(tmp_path: Path) -> None:
    data = tmp_path / "events.jsonl"
    data.write_text("".join(json.dumps({"key": str(i % 3), "value": {"id": i % 3}}) + "\n"
                            for i in range(40)))
    proc = ok("run", COUNTER, "--input", f"events={data}", cwd=tmp_path)
    final = proc.stderr.strip().splitlines()[-1]
    # 40 messages; the end-of-stream and watermark records are no messages
    assert final.split()[:2] == ["processed", "40"], final
