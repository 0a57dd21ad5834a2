"""A job that needs more open files than the process may hold: the soft limit is raised up to
the hard one when that is enough, and otherwise the job fails before it starts, with one line
saying how many it needs, the limit and how to raise it. Running out later is that same clear
error, not an lmdb traceback. Real processes under a lowered ``RLIMIT_NOFILE``."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")

APP = '''
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

app = StreamApplication("many-stores")
local = LocalSystem("local")
serde = KVSerde(StringSerde(), JsonSerde())
events = app.input(local.input("events", serde=serde, partitions=64))
out = app.output(local.output("out", serde=serde, partitions=64))
app.table("a", serde=serde)
app.table("b", serde=serde)


class Count:
    def init(self, ctx):
        self.a, self.b = ctx.table("a"), ctx.table("b")

    def __call__(self, m):
        n = (self.a.get(m.key) or 0) + 1
        self.a.put(m.key, n)
        self.b.put(m.key, -n)
        return KV(m.key, n)


events.map(Count(), name="count").send_to(out)
'''


def limit(soft: int, hard: int) -> Callable[[], None]:
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def job(tmp_path: Path) -> str:
    (tmp_path / "many.py").write_text(APP)
    (tmp_path / "e.jsonl").write_text("".join(
        json.dumps({"key": f"k{i}", "value": i}) + "\n" for i in range(300)))
    app = f"{tmp_path / 'many.py'}:app"
    load = subprocess.run([CLI, "load", app, "events", "e.jsonl"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert load.returncode == 0, load.stderr
    return app


def run(app: str, cwd: Path, soft: int, hard: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, "run", app, "-q"], cwd=cwd, capture_output=True, text=True,
                          timeout=300, preexec_fn=limit(soft, hard))


def test_a_job_needing_more_files_than_the_hard_limit_fails_first_saying_how_many(
        tmp_path: Path) -> None:
    app = job(tmp_path)
    proc = run(app, tmp_path, 256, 256)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, \
        proc.stderr
    for fragment in ("samza-dsl run: error: job 'many-stores-1' (64 tasks", "2 store(s)",
                     "needs about", "256 files", "hard limit 256", "ulimit -n ",
                     "--containers"):
        assert fragment in proc.stderr, proc.stderr
    needed = int(proc.stderr.split("needs about ")[1].split()[0])
    assert needed > 64 * 2 * 2 and f"`ulimit -n {needed}`" in proc.stderr
    assert not (tmp_path / ".samza" / "many-stores-1" / "stores").exists()  # nothing opened


def test_the_soft_limit_is_raised_to_the_hard_one_when_that_is_enough(tmp_path: Path) -> None:
    app = job(tmp_path)
    proc = run(app, tmp_path, 256, 4096)
    assert proc.returncode == 0, proc.stderr
    dump = subprocess.run([CLI, "dump", app, "out"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert dump.returncode == 0 and len(dump.stdout.splitlines()) == 300


RUN_OUT = '''
import os, resource, sys
from runtime.local.log import LocalLog
from samza_dsl.errors import SamzaError
root = sys.argv[1]
open_now = len(os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 10, open_now + 10))
logs = []
try:
    for i in range(10):
        logs.append(LocalLog(os.path.join(root, str(i))))
except SamzaError as e:
    print(e)
'''


def test_running_out_of_files_later_is_a_clear_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", RUN_OUT, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    text = proc.stdout
    assert "too many open files" in text and "ulimit -n N" in text, text
    assert "--containers" in text and "delete" not in text, text
