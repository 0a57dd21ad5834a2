"""benchmarks/soak.py (W9) runs from any directory and reports job.dir's size over time."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_soak_runs_from_another_directory_and_reports_sizes(tmp_path) -> None:
    job_dir = tmp_path / "job"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "soak.py"), "--minutes", "0.15",
         "--interval", "3", "--rate", "2000", "--dir", str(job_dir)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    samples, summary = lines[:-1], lines[-1]
    assert len(samples) >= 3
    assert all(s["job_dir_bytes"] > 0 and s["rss_bytes"] > 0 for s in samples)
    assert samples[-1]["messages_loaded"] > samples[0]["messages_loaded"] > 0
    assert summary["summary"] and summary["end_job_dir_bytes"] == samples[-1]["job_dir_bytes"]
    assert summary["bounded"] == (proc.returncode == 0)
    assert (job_dir / "logs").is_dir()  # the job ran where it was told, not in the cwd
    assert not (tmp_path / ".samza").exists()


def test_the_soak_with_a_ttl_writes_new_keys_and_its_table_keeps_only_the_recent_ones(
        tmp_path) -> None:
    from runtime.host.jobdir import store_dir
    from runtime.state.lmdb_store import LmdbStore

    job_dir = tmp_path / "job"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "soak.py"), "--minutes", "0.15",
         "--interval", "3", "--rate", "1000", "--ttl", "1", "--dir", str(job_dir)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    summary = json.loads(proc.stdout.splitlines()[-1])
    assert summary["ttl_s"] == 1.0 and summary["messages_loaded"] > 3000
    held = 0
    for p in range(4):
        store = LmdbStore.open(store_dir(str(job_dir), "counts", f"Partition {p}"),
                               name="counts", task=f"Partition {p}", key_encode=str.encode,
                               key_decode=bytes.decode, value_encode=bytes, value_decode=bytes)
        held += store.lmdb.count()
        store.close()
    # every key is new and lives a second: the table holds the last seconds' keys, not all
    assert 0 < held < summary["messages_loaded"] / 2, (held, summary)
