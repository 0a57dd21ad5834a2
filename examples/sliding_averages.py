"""Sliding averages: each sensor's mean, minimum and maximum temperature over the last minute,
updated every 10 seconds, with a hopping window of event time.

``readings`` (2 partitions) holds ``KV(sensor id, {"celsius": float, "ts": seconds})``. The job

1. keeps, per sensor, a hopping window of ``SIZE`` (1 minute) that hops every ``HOP`` (10 s)
   (``Windows.keyed_hopping``): each reading belongs to ``SIZE / HOP`` = 6 overlapping panes;
2. folds readings into a small accumulator ``[count, sum in millidegrees, min, max]``. With
   ``combine`` the window keeps one such accumulator per sensor and 10-second hop, not one per
   pane, and merges the 6 hops of a pane when it fires;
3. sends ``KV(sensor, {"window_start_ms", "window_end_ms", "readings", "mean", "min", "max"})``
   to ``sensor-stats`` for every pane.

The window runs on the readings' event time (``ts``), so replaying the same input gives the same
panes. Look at the plan with ``samza-dsl plan examples/sliding_averages.py:app``.
``sample_input(n)`` makes deterministic input for tests and demos:

>>> readings = sample_input(3)
>>> readings[0]
KV(key='sensor-2', value={'celsius': 29.5, 'ts': 1700000002.077})
>>> stats(KV("s", {"celsius": 20.5, "ts": 1.0}), [1, 19500, 19.5, 19.5])
[2, 40000, 19.5, 20.5]
>>> merge_stats([1, 19500, 19.5, 19.5], [2, 40000, 19.5, 20.5])
[3, 59500, 19.5, 20.5]
"""

from __future__ import annotations

import itertools
import random
from datetime import timedelta
from typing import Any

from samza_dsl import KV, StreamApplication, WindowPane, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

__all__ = ["app", "sample_input", "SIZE", "HOP", "INPUT_PARTITIONS"]

SIZE = timedelta(minutes=1)
HOP = timedelta(seconds=10)
INPUT_PARTITIONS = 2


def _json_kv() -> KVSerde:
    return KVSerde(StringSerde(), JsonSerde())


# -- user functions ------------------------------------------------------------------------------

def sensor_of(reading: KV[str, Any]) -> str:
    return str(reading.key)


def reading_time(reading: KV[str, dict[str, Any]]) -> float:
    return float(reading.value["ts"])


def no_stats() -> list[Any]:
    """The empty accumulator ``[count, sum in millidegrees, min, max]``; ``merge_stats``'s
    identity."""
    return [0, 0, None, None]


def stats(reading: KV[str, dict[str, Any]], acc: list[Any]) -> list[Any]:
    """``acc`` with one more reading (a new list: the window may have emitted ``acc``)."""
    c = float(reading.value["celsius"])
    n, total, low, high = acc
    return [n + 1, total + round(c * 1000), c if low is None else min(low, c),
            c if high is None else max(high, c)]


def merge_stats(a: list[Any], b: list[Any]) -> list[Any]:
    """Two accumulators as one: associative, with ``no_stats()`` as identity."""
    lows = [x for x in (a[2], b[2]) if x is not None]
    highs = [x for x in (a[3], b[3]) if x is not None]
    return [a[0] + b[0], a[1] + b[1], min(lows) if lows else None,
            max(highs) if highs else None]


def to_row(pane: WindowPane) -> KV[str, dict[str, Any]]:
    n, total, low, high = pane.message
    start = int(pane.key.pane_id)
    return KV(pane.key.key, {"window_start_ms": start,
                             "window_end_ms": start + int(SIZE.total_seconds() * 1000),
                             "readings": n, "mean": round(total / n / 1000, 3),
                             "min": low, "max": high})


# -- the application -----------------------------------------------------------------------------

app = StreamApplication("sliding-averages", config={"job.default.system": "local"})
local = LocalSystem("local")

readings = app.input(local.input("readings", serde=_json_kv(), partitions=INPUT_PARTITIONS))
(
    readings.window(Windows.keyed_hopping(sensor_of, SIZE, HOP, init=no_stats, fold=stats,
                                          combine=merge_stats, event_time=reading_time),
                    name="last-minute")
    .map(to_row, name="to-row")
    .send_to(app.output(local.output("sensor-stats", serde=_json_kv(), partitions=1)))
)


# -- sample input --------------------------------------------------------------------------------

START_MS = 1_700_000_000_000
SENSORS = 5


def sample_input(n: int, seed: int = 0) -> list[KV[str, dict[str, Any]]]:
    """``n`` readings, ``KV(sensor id, {"celsius", "ts"})``, whose event times (seconds) rise by
    0.5 to 3 s per reading. The same ``n`` and ``seed`` give the same list."""
    if n < 0:
        raise ValueError(f"sample_input needs n >= 0, got {n}")
    rng = random.Random(seed)
    steps = [rng.randint(500, 3000) for _ in range(n)]
    times = list(itertools.accumulate(steps, initial=START_MS))[1:]
    return [KV(f"sensor-{rng.randrange(SENSORS)}",
               {"celsius": round(rng.uniform(15.0, 30.0), 1), "ts": t / 1000}) for t in times]

if __name__ == "__main__":
    print(app.plan().explain())
