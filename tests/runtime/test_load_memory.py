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


def test_a_line_longer_than_a_message_may_be_is_refused_before_it_is_read_whole(
        tmp_path: Path) -> None:
    from samza_dsl.json_text import MAX_JSON_LINE_BYTES

    # one line of 48 MiB, three times the limit: it was read whole and decoded (a 1 GB line
    # peaked at 5.3 GB); now at most the limit is read, and the load says why it stops
    long_line = tmp_path / "long.jsonl"
    with open(long_line, "w", encoding="utf-8") as f:
        f.write(json.dumps({"key": "1", "value": {"id": 1}}) + "\n")
        f.write('{"key": "2", "value": {"ids": [')
        chunk = ",".join(["12345678"] * 1024) + ","
        for _ in range(3 * MAX_JSON_LINE_BYTES // len(chunk)):
            f.write(chunk)
        f.write("0]}}\n")
    small = tmp_path / "small.jsonl"
    small.write_text(json.dumps({"key": "1", "value": {"id": 1}}) + "\n")
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    base = load_peak(tmp_path / "a", small)
    proc = subprocess.run([sys.executable, "-c", PEAK, CLI, "load", COUNTER, "events",
                           str(long_line)], cwd=tmp_path / "b", capture_output=True, text=True,
                          timeout=300)
    rc, peak_kib = proc.stdout.split()
    assert rc == "2", proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"samza-dsl load: error: {long_line}:2: the line is longer than 16 MiB, the most a "
        f"message may take (samza_dsl.json_text.MAX_JSON_LINE_BYTES); split it into smaller "
        f"messages"], proc.stderr
    assert int(peak_kib) * 1024 - base < MAX_JSON_LINE_BYTES + (24 << 20), int(peak_kib) >> 10
    assert not (tmp_path / "b" / ".samza").exists()  # nothing loaded, no job made
