"""``./dev main`` means something: the job it runs, run through the real ``samza-dsl`` console
script, reflects most of its input in its output, says what came in, went out and was late, and
``samza-dsl reprocess`` of the same sample on Spark gives the same output."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "samza-dsl")


def dev_main() -> tuple[str, int, list[str]]:
    """The app, sample size and other arguments of the ``samza-dsl run`` that ``./dev main`` runs."""
    text = (REPO / "dev").read_text()
    m = re.search(r"^\s*\S*samza-dsl\"? run (.+?)\s*\"\$@\"\s*$", text, re.M)
    assert m, "./dev main runs no `samza-dsl run`"
    app_path = re.search(r"^\s*app=(\S+)\s*$", text, re.M)  # "$app:app" names it
    args = shlex.split(m.group(1).replace("$app", app_path.group(1) if app_path else "$app"))
    app = args[0]
    n = int(args[args.index("--sample") + 1])
    return str(REPO / app), n, args[1:]


def cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"samza-dsl {' '.join(args)}: {proc.stderr}"
    return proc


def key(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True)


def test_the_demo_reflects_its_input_and_reprocessing_gives_the_same(tmp_path: Path) -> None:
    app, n, extra = dev_main()
    run = cli("run", app, *extra, "-q", "--show", "0", cwd=tmp_path)
    lines = run.stdout.splitlines()
    # the summary: what came in, went out, was late
    assert f"in: {n:,} new message(s)" in run.stdout, run.stdout
    out_line = next(ln for ln in lines if ln.startswith("out: "))
    assert any(ln.startswith("late: ") for ln in lines), run.stdout

    # the outputs, as the user sees them
    from runtime.ops.loader import load_app

    outputs = sorted(load_app(app)._outputs)
    streamed: dict[str, Counter[str]] = {}
    for sid in outputs:
        dumped = cli("dump", app, sid, cwd=tmp_path).stdout.splitlines()
        streamed[sid] = Counter(key(json.loads(ln)) for ln in dumped)
    assert sum(sum(c.values()) for c in streamed.values()) == int(out_line.split()[1].replace(
        ",", ""))

    # most of the input is in the results: every view by a person counted once
    sample = {}
    for sid in sorted(load_app(app)._inputs):
        path = tmp_path / f"{sid}.jsonl"
        path.write_text(cli("sample", app, sid, str(n), cwd=tmp_path).stdout)
        sample[sid] = [json.loads(ln) for ln in path.read_text().splitlines()]
    views = sample["page-views"]
    assert len(views) == n
    counted = sum(json.loads(k)["value"]["views"] * c
                  for sid in outputs for k, c in streamed[sid].items())
    humans = sum(1 for v in views if not v["bot"])
    assert counted == humans and counted >= 0.9 * n, (counted, humans, n)

    # the same sample reprocessed on Spark: the same output
    args = [a for sid in sample for a in ("--input", f"{sid}={tmp_path / f'{sid}.jsonl'}")]
    args += [a for sid in outputs for a in ("--output", f"{sid}=out/{sid}.jsonl")]
    cli("reprocess", app, *args, "--no-progress", cwd=tmp_path)  # out/ is made as needed
    for sid in outputs:
        rows = [json.loads(ln) for f in sorted((tmp_path / "out" / f"{sid}.jsonl").iterdir())
                if f.name.startswith("part") for ln in f.read_text().splitlines()]
        assert Counter(key(r) for r in rows) == streamed[sid], sid
