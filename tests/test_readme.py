"""Every shell block of README.md runs, as written, in order, in a new directory.

The directory holds what a user's checkout has: ``dev`` and ``examples`` (links into this
repository), and the project's venv is first on PATH, as ``. .venv/bin/activate`` puts it. Each
block runs in its own ``bash -e`` (a failing line fails the block); files a block writes stay for
the next. One line is not run as written: ``./dev test`` would run this suite inside itself, so it
runs as ``./dev test --collect-only -q`` (ruff, mypy and the collection of every test). The
``./dev`` commands skip their set-up when this runs under ``./dev test``, which has just done it.
Spark, Graphviz and the local log are real.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(bash|sh|console)\s*\n(.*?)^```", re.M | re.S)
INSTEAD = {"./dev test": "./dev test --collect-only -q"}


def shell_blocks(text: str) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(text)]


def as_run(block: str) -> str:
    lines = []
    for line in block.splitlines():
        for written, run in INSTEAD.items():
            if line.split("#")[0].strip() == written:
                line = line.replace(written, run, 1)
        lines.append(line)
    return "\n".join(lines) + "\n"


def _tree(root: Path) -> dict[str, tuple[int, int]] | None:
    """Every file under ``root`` with its size and modification time; None when it is absent."""
    if not root.exists():
        return None
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_readme_has_shell_blocks_to_run() -> None:
    blocks = shell_blocks((REPO / "README.md").read_text())
    assert len(blocks) >= 5
    text = "\n".join(blocks)
    for command in ("./dev main", "samza-dsl run", "samza-dsl sample", "samza-dsl reprocess",
                    "samza-dsl load", "samza-dsl dump", "samza-dsl reset"):
        assert command in text


@pytest.mark.slow
def test_every_readme_shell_block_runs(tmp_path: Path) -> None:
    venv_bin = Path(sys.executable).parent
    for name in ("dev", "examples"):
        (tmp_path / name).symlink_to(REPO / name)
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
           "COLUMNS": "100"}
    if Path(sys.prefix).resolve() == (REPO / ".venv").resolve():
        env["SAMZA_DSL_SET_UP"] = "1"  # ./dev test set it up just now
    before = _tree(REPO / ".samza")  # ./dev main runs the job where it is called, not here
    for i, block in enumerate(shell_blocks((REPO / "README.md").read_text()), 1):
        script = as_run(block)
        proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (f"README shell block {i} failed (exit {proc.returncode}):\n"
                                      f"{script}\n--- stdout:\n{proc.stdout[-3000:]}\n"
                                      f"--- stderr:\n{proc.stderr[-3000:]}")
    # what the blocks said they make, in the directory they ran in, and nothing in the repository
    assert _tree(REPO / ".samza") == before, "a README block wrote job state into the repository"
    assert (tmp_path / "events.jsonl").stat().st_size > 0
    assert any((tmp_path / "out" / "counts.jsonl").glob("part-*"))
    assert (tmp_path / "plan.svg").read_text().lstrip().startswith("<")
