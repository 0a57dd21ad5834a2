"""W1 and W2 on samza-dsl, as ``benchmarks/run.py`` runs them (in-memory streams, W1's table an
in-memory store), in the project's venv, for the side-by-side runs of ``benchmarks/peers/``.

    .venv/bin/python -m benchmarks.peers.run_samza W1 1000000
    .venv/bin/python -m benchmarks.peers.run_samza W2 20000 100
"""

from __future__ import annotations

import time
from importlib.metadata import version
from typing import Any

from benchmarks.peers.workload import run_one
from benchmarks.workloads import w1_app, w2_app
from runtime.testing import TestRunner
from samza_dsl import KV


def w1(parts: dict[int, list[tuple[str, bytes]]]) -> tuple[float, list[Any]]:
    app, inp, out = w1_app()
    kvs = {p: [KV(k, v) for k, v in msgs] for p, msgs in parts.items()}
    t0 = time.perf_counter()
    result = TestRunner(app).add_input(inp, kvs).run(timeout=600)
    secs = time.perf_counter() - t0
    return secs, [(kv.key, kv.value) for kv in result.messages(out)]


def w2(n: int, c: int) -> tuple[float, list[int]]:
    app, inp, out = w2_app(c)
    t0 = time.perf_counter()
    result = TestRunner(app).add_input(inp, list(range(n))).run(timeout=600)
    return time.perf_counter() - t0, list(result.messages(out))


if __name__ == "__main__":
    run_one("samza-dsl", version("samza-dsl"), w1, w2)
