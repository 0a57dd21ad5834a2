"""W6A: W6's restart after the store is lost, on an *aged* job: many updates of few keys.

The W1 job (``benchmarks.local_workloads.w6_app``) counts events of ``keys`` ids; each age
loads ``updates`` more events over the same ids and runs the job over them, flushing its table
after every batch (``stores.counts.write.batch.size=1``), so the changelog gets an entry per key
and batch: about ``updates`` entries per age. At each age the store is deleted and the job
restarted (loading one message), timed to its first processed message, three times (median), in
three jobs fed the same events:

- ``uncompacted``: changelog compaction off: the restore replays every entry the job ever wrote;
- ``compacted``: a copy of that job, compacted with ``samza-dsl compact`` (``compact_job``): the
  restore replays about one entry per key;
- ``background``: the job as it runs by default, compacting its changelog after commits.

The baseline (same run) is the restart of a fresh job that wrote each of the ``keys`` ids once:
restoring ``keys`` entries. ``vs_fresh`` is each figure over it (target for ``compacted`` and
``background``: close to 1, and the same at both ages).

    python benchmarks/run.py W6A --runs 3
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import tempfile
from collections import Counter
from typing import Any

from benchmarks.common import emit, timed
from benchmarks.local_workloads import (
    RESTARTS,
    _config,
    _events,
    _load,
    _median_restart,
    _progress,
    _restart,
    w6_app,
)
from runtime.local.compaction import compact_job
from runtime.local.system import LocalJob
from runtime.runner import LocalRunner

__all__ = ["run_w6_aged"]

CHANGELOG = "readwrite-counter-1-counts-changelog"


def _entries(config: dict[str, Any]) -> tuple[int, int]:
    """(offsets of the changelog, records it holds) over its partitions."""
    job = LocalJob(w6_app(), config, run=False)
    try:
        lg = job.log_of("local")
        end = kept = 0
        for p in range(lg.partitions(CHANGELOG) or 0):
            end += lg.end_offset(CHANGELOG, p)
            pos = 0
            while True:
                offsets, records = lg.read_with_offsets(CHANGELOG, p, pos, 65536)
                if not records:
                    break
                kept += len(records)
                pos = offsets[-1] + 1
        return end, kept
    finally:
        job.close()


class _Job:
    """One job directory of the workload, with the count of id 1 it should give next."""

    def __init__(self, root: str, name: str, extra: dict[str, Any]) -> None:
        self.dir = os.path.join(root, name)
        self.config = {**_config(self.dir), "stores.counts.write.batch.size": 1, **extra}
        self.count = 0  # of id "1" so far

    def feed(self, ids: list[int]) -> float:
        app = w6_app()
        _load(app, self.config, _events(ids))
        self.count += sum(1 for i in ids if i == 1)
        secs, runner = timed(lambda: LocalRunner(app, self.config).run())
        runner.close()
        return secs

    def restores(self) -> dict[str, Any]:
        """The median of RESTARTS restarts, each after deleting the stores."""
        samples = []
        for _ in range(RESTARTS):
            self.count += 1
            shutil.rmtree(os.path.join(self.dir, "stores"))
            r = _restart(w6_app(), self.config, "1", self.count)
            assert r["modes"] == ["rebuilt"], f"W6A: restore modes {r['modes']}"
            samples.append(r)
        return _median_restart(samples)


def run_w6_aged(keys: int, updates: int, ages: int = 2, seed: int = 6
                ) -> dict[str, dict[str, Any]]:
    """One W6A run: a JSON line per (age, changelog) and one for the fresh baseline."""
    root = tempfile.mkdtemp(prefix="w6a-")
    lines: dict[str, dict[str, Any]] = {}
    rng = random.Random(seed)
    try:
        fresh = _Job(root, "fresh", {})
        _progress(f"W6A: fresh baseline, {keys} ids written once")
        fresh.feed(list(range(1, keys + 1)))
        base = fresh.restores()
        lines["fresh"] = emit(
            "W6A", {"keys": keys, "updates": keys, "changelog": "fresh"}, 1, base["first"],
            f"seconds-to-first-message restoring {keys} keys written once (same run)",
            1 / base["first"], seconds_to_first_message=round(base["first"], 4),
            samples_to_first_message=base["samples"], restore_seconds=round(base["restore_s"], 4),
            entries_replayed=base["replayed"], vs_fresh=1.0)
        off = _Job(root, "uncompacted", {"stores.counts.changelog.compaction": False})
        background = _Job(root, "background", {})
        truth: Counter[int] = Counter()
        for age in range(1, ages + 1):
            ids = [rng.randint(1, keys) for _ in range(updates)]
            truth.update(ids)
            _progress(f"W6A age {age}: {updates} more updates of {keys} ids, in 2 jobs")
            fill_off = off.feed(ids)
            fill_bg = background.feed(ids)
            compacted = _Job(root, f"compacted-{age}", {})
            shutil.copytree(off.dir, compacted.dir)
            compacted.count = off.count
            job = LocalJob(w6_app(), compacted.config, run=False)
            try:
                results = compact_job(job)
            finally:
                job.close()
            compact_s = sum(r.seconds for r in results)
            for name, job, fill in (("uncompacted", off, fill_off), ("compacted", compacted, None),
                                    ("background", background, fill_bg)):
                end, held = _entries(job.config)
                r = job.restores()
                _progress(f"W6A age {age} {name}: changelog {end} offsets, {held} records; "
                          f"first message after {r['first']:.3f} s ({r['replayed']} replayed)")
                lines[f"{name}-{age}"] = emit(
                    "W6A", {"keys": keys, "updates": updates * age, "age": age,
                            "changelog": name}, 1, r["first"],
                    f"seconds-to-first-message restoring {keys} keys written once (same run)",
                    1 / base["first"], seconds_to_first_message=round(r["first"], 4),
                    samples_to_first_message=r["samples"],
                    restore_seconds=round(r["restore_s"], 4), entries_replayed=r["replayed"],
                    changelog_offsets=end, changelog_records=held,
                    vs_fresh=round(r["first"] / base["first"], 3),
                    fill_seconds=None if fill is None else round(fill, 3),
                    compact_seconds=round(compact_s, 3) if name == "compacted" else None)
            shutil.rmtree(compacted.dir)
        flat = {name: round(lines[f"{name}-{ages}"]["seconds"] / lines[f"{name}-1"]["seconds"], 3)
                for name in ("uncompacted", "compacted", "background")}
        print(json.dumps({"workload": "W6A", "aging": True, "keys": keys, "ages": ages,
                          "ratio_last_age_to_first": flat,
                          "vs_fresh_last_age": {n: lines[f"{n}-{ages}"]["vs_fresh"]
                                                for n in flat}}), flush=True)
    finally:
        with contextlib.suppress(Exception):
            shutil.rmtree(root, ignore_errors=True)
    return lines
