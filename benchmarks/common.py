"""Shared by the benchmark scripts: timing, peak RSS, one JSON line per run, medians."""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["RowRuns", "timed", "peak_rss_mb", "emit", "median_summary"]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def emit(workload: str, params: dict[str, Any], messages: int, seconds: float,
         baseline_name: str, baseline_msgs_per_s: float, **extra: Any) -> dict[str, Any]:
    rate = messages / seconds if seconds > 0 else float("inf")
    line = {"workload": workload, "params": params, "messages": messages,
            "seconds": round(seconds, 4), "msgs_per_s": round(rate, 1),
            "peak_rss_mb": round(peak_rss_mb(), 1), "baseline": baseline_name,
            "baseline_msgs_per_s": round(baseline_msgs_per_s, 1),
            "ratio": round(rate / baseline_msgs_per_s, 3) if baseline_msgs_per_s else None}
    line.update(extra)
    print(json.dumps(line), flush=True)
    return line


def median_summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run's figures (by ratio to the same-run baseline)."""
    ratios = [ln["ratio"] for ln in lines]
    rates = [ln["msgs_per_s"] for ln in lines]
    bases = [ln["baseline_msgs_per_s"] for ln in lines]
    out = {"workload": lines[0]["workload"], "params": lines[0]["params"], "runs": len(lines),
           "median_msgs_per_s": round(statistics.median(rates), 1),
           "median_baseline_msgs_per_s": round(statistics.median(bases), 1),
           "median_ratio": round(statistics.median(ratios), 3), "summary": True}
    for key in ("floor_ratio", "of_floor"):  # where the workload also timed its floor
        if all(key in ln for ln in lines):
            out[f"median_{key}"] = round(statistics.median(ln[key] for ln in lines), 3)
    print(json.dumps(out), file=sys.stdout, flush=True)
    return out


class RowRuns:
    """The runs of a workload that writes rows (an output of a job against a plain loop that
    writes the same rows with the same library): one JSON line a run, then one of the medians."""

    def __init__(self, workload: str, rows: int) -> None:
        self.workload = workload
        self.rows = rows
        self.jobs: list[float] = []
        self.plains: list[float] = []
        self.ratios: list[float] = []

    def add(self, plain_s: float, job_s: float) -> None:
        self.plains.append(self.rows / plain_s)
        self.jobs.append(self.rows / job_s)
        self.ratios.append(plain_s / job_s)
        print(json.dumps({"workload": self.workload, "run": len(self.ratios),
                          "rows": self.rows, "job_rows_per_s": round(self.jobs[-1]),
                          "plain_rows_per_s": round(self.plains[-1]),
                          "ratio": round(self.ratios[-1], 3)}), flush=True)

    def summary(self) -> None:
        print(json.dumps({"workload": self.workload, "median": True, "rows": self.rows,
                          "job_rows_per_s": round(statistics.median(self.jobs)),
                          "plain_rows_per_s": round(statistics.median(self.plains)),
                          "ratio": round(statistics.median(self.ratios), 3)}), flush=True)
