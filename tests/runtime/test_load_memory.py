"""``samza-dsl load`` reads its file a line at a time and appends in bounded transactions: its
peak memory does not grow with the file. Real processes; peak RSS from the kernel's rusage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
COUNTER = f"{ROOT / 'examples' / 'readwrite_counter.py'}:app"

# runs a command and prints its peak RSS in KiB: the figure of that one child, not of
# whatever else the test process ran before
PEAK = """
import resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(proc.stderr)
print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def load_peak(cwd: Path, path: Path) -> int:
    proc = subprocess.run([sys.executable, "-c", PEAK, CLI, "load", COUNTER, "events", str(path)],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    rc, peak_kib = proc.stdout.split()
    assert rc == "0", proc.stderr
    return int(peak_kib) * 1024


def test_the_peak_memory_of_a_load_does_not_grow_with_its_file(tmp_path: Path) -> None:
    n = 200_000
    big = tmp_path / "big.jsonl"
    with open(big, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"key": str(i % 5000), "value": {
                "id": i, "name": f"user-{i}", "tags": ["a", "b", "c"], "score": i * 0.5}}) + "\n")
    small = tmp_path / "small.jsonl"
    small.write_text("".join(big.open().readline() for _ in range(1)))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    base = load_peak(tmp_path / "a", small)
    peak = load_peak(tmp_path / "b", big)
    # what the file's messages take decoded, all held at once, from a tenth of them
    with open(big, encoding="utf-8") as f:
        lines = [next(f) for _ in range(n // 10)]
    tracemalloc.start()
    decoded = [json.loads(line) for line in lines]
    held = tracemalloc.get_traced_memory()[0] * 10
    tracemalloc.stop()
    del decoded
    assert peak - base < min(held // 3, 48 << 20), ((peak - base) >> 20, held >> 20)
    dump = subprocess.run([CLI, "dump", COUNTER, "events"], cwd=tmp_path / "b",
                          capture_output=True, text=True, timeout=300)
    assert dump.returncode == 0 and len(dump.stdout.splitlines()) == n
