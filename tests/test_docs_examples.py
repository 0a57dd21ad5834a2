"""Every Python block of README.md and of the docs pages runs, and so does every shell block of a
docs page (README.md's shell blocks run in tests/test_readme.py).

A page's blocks run in order, as a reader would type them, in one fresh Python process (the
Python blocks share its namespace, as cells of a notebook do) in a new directory that holds a
link to ``examples/``. A shell block runs in ``bash -e`` in that directory with the project's
venv first on PATH. A block that is deliberately not run (it needs a Kafka cluster, say) has
``<!-- not run: why -->`` on the line before its fence; the reason shows in the page's source
only, and such blocks are few. A Python block whose first line is ``# file: NAME`` is a file the
reader saves: it is written to NAME (for the shell blocks after it) and run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(\S.*?)\s*-->\s*$")
PYTHON = {"python", "py", "pycon"}
SHELL = {"bash", "sh", "console"}
#: pages whose blocks start Spark: still run, marked slow
SLOW = {"docs/spark.md"}


def pages() -> list[Path]:
    docs = sorted(p for p in (REPO / "docs").rglob("*.md") if "api" not in p.relative_to(
        REPO / "docs").parts[:1])
    return [REPO / "README.md", *docs]


def blocks(page: Path) -> list[dict[str, object]]:
    """The page's code blocks: kind (python or shell), the line of the fence, the code, and the
    reason it is not run (None: it runs). README.md's shell blocks are test_readme.py's."""
    text = page.read_text(encoding="utf-8")
    out: list[dict[str, object]] = []
    for m in FENCE.finditer(text):
        lang = m.group(1).lower()
        kind = "python" if lang in PYTHON else "shell" if lang in SHELL else None
        if kind is None or (kind == "shell" and page.name == "README.md"):
            continue
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = NOT_RUN.search(before)
        out.append({"kind": kind, "line": line, "code": m.group(2),
                    "skip": skip.group(1) if skip else None})
    return out


# Runs one page's blocks in order; prints where a block failed and exits 1.
RUNNER = r"""
import json, os, subprocess, sys, traceback
page, blocks = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__"}
for b in blocks:
    where = f"{page}:{b['line']}"
    if b["skip"] is not None:
        continue
    if b["kind"] == "python":
        first = b["code"].split("\n", 1)[0]
        if first.startswith("# file: "):
            with open(first[len("# file: "):].strip(), "w") as f:
                f.write(b["code"])
        try:
            # padded so that a traceback's line numbers are the page's
            exec(compile("\n" * b["line"] + b["code"], page, "exec"), ns)
        except BaseException:
            traceback.print_exc()
            print(f"\nthe Python block at {where} failed", file=sys.stderr)
            sys.exit(1)
    else:
        proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", b["code"]])
        if proc.returncode != 0:
            print(f"\nthe shell block at {where} failed (exit {proc.returncode})",
                  file=sys.stderr)
            sys.exit(1)
"""


def _param(page: Path) -> object:
    rel = page.relative_to(REPO).as_posix()
    return pytest.param(page, id=rel, marks=[pytest.mark.slow] if rel in SLOW else [])


@pytest.mark.parametrize("page", [_param(p) for p in pages()])
def test_every_block_of_the_page_runs(page: Path, tmp_path: Path) -> None:
    rel = page.relative_to(REPO).as_posix()
    todo = blocks(page)
    if not any(b["skip"] is None for b in todo):
        assert not todo, f"{rel}: every code block is marked not run"
        return  # a page with no code (the draft design pages)
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(REPO / "examples")
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps([rel, todo]))
    venv_bin = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(REPO), "COLUMNS": "100", "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(spec)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (f"{rel}: a code block failed\n--- stdout:\n"
                                  f"{proc.stdout[-3000:]}\n--- stderr:\n{proc.stderr[-5000:]}")


def test_the_pages_have_python_blocks_to_run() -> None:
    counted = {p.relative_to(REPO).as_posix(): sum(b["kind"] == "python" for b in blocks(p))
               for p in pages()}
    assert counted["README.md"] >= 1
    for page in ("docs/getting-started.md", "docs/testing.md", "docs/windows.md",
                 "docs/joins-and-tables.md", "docs/operators.md"):
        assert counted[page] >= 2, f"{page} has {counted[page]} Python blocks"


def test_blocks_not_run_are_few_and_say_why() -> None:
    every = [(p, b) for p in pages() for b in blocks(p)]
    skipped = [(p.relative_to(REPO).as_posix(), b["line"], b["skip"]) for p, b in every
               if b["skip"] is not None]
    assert len(skipped) * 6 <= len(every), f"{len(skipped)} of {len(every)} blocks not run: " \
                                           f"{skipped}"
    for where in skipped:
        assert len(str(where[2])) >= 10, f"say why the block is not run: {where}"


def test_a_failing_block_names_its_page_and_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n```python\nx = 1\n```\n\n<!-- not run: needs a cluster -->\n"
                    "```python\nraise SystemExit(3)\n```\n\n```python\n# file: m.py\nY = 2\n```\n\n"
                    "```bash\ntest -f m.py\n```\n\n```python\nassert x == 2\n```\n")
    found = blocks(page)
    assert [b["skip"] for b in found] == [None, "needs a cluster", None, None, None]
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps(["page.md", found]))
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(spec)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "the Python block at page.md:21 failed" in proc.stderr
    assert 'File "page.md", line 22' in proc.stderr and "AssertionError" in proc.stderr
    assert (tmp_path / "m.py").read_text() == "# file: m.py\nY = 2\n"
