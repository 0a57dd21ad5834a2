"""W1 and W2 as every system of ``benchmarks/peers/`` runs them: the same messages, the same user
functions, the same plain-Python baselines and the same output checks.

Only the standard library and msgspec are imported here, so the peers' own venvs (which hold
neither samza-dsl nor its dependencies) import this module as well as the project's venv does.

- W1, the ReadWrite counter: ``n`` messages ``{"id": int in [1, 10^4], "pad": 100-byte str}`` as
  JSON bytes, keyed by ``str(id)``, in 4 partitions (``id % 4``). Per message: decode the JSON,
  read the id's count from state, add 1, write it back, emit ``(id, JSON-encoded count)``. The
  baseline is a plain loop doing the same with a dict.
- W2, async enrichment: ``n`` messages through a call awaiting ``asyncio.sleep(0.005)``, at most
  ``c`` in flight. The baselines are the limit ``c / 0.005`` and a bare asyncio semaphore and
  gather over the same call.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from benchmarks.common import emit

__all__ = ["W1_PARTITIONS", "W2_LATENCY", "w1_messages", "w1_truth", "w1_plain_loop",
           "w1_check", "enrich", "w2_bare_asyncio", "w2_check", "best_of", "run_one"]

W1_PARTITIONS = 4
W2_LATENCY = 0.005
PAD = "x" * 100

_dec = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()


# -- W1 ------------------------------------------------------------------------------------------

def w1_messages(n: int, partitions: int = W1_PARTITIONS,
                seed: int = 1) -> dict[int, list[tuple[str, bytes]]]:
    """W1's input: ``{partition: [(str(id), JSON bytes), ...]}``, the same for every system."""
    rnd = random.Random(seed)
    parts: dict[int, list[tuple[str, bytes]]] = {p: [] for p in range(partitions)}
    for _ in range(n):
        i = rnd.randint(1, 10_000)
        parts[i % partitions].append((str(i), _enc.encode({"id": i, "pad": PAD})))
    return parts


def w1_truth(parts: dict[int, list[tuple[str, bytes]]]) -> Counter[str]:
    """How many messages each id has: the count a correct run emits last for it."""
    return Counter(key for msgs in parts.values() for key, _ in msgs)


def w1_plain_loop(parts: dict[int, Iterable[Any]]) -> int:
    """The baseline: decode, a dict counter, encode the output. Takes ``(key, bytes)`` pairs (or
    KVs, which unpack the same way); returns how many outputs it made."""
    counts: dict[int, int] = {}
    out = []
    for msgs in parts.values():
        for _, value in msgs:
            i = _dec.decode(value)["id"]
            c = counts.get(i, 0) + 1
            counts[i] = c
            out.append(_enc.encode(c))
    return len(out)


def w1_check(system: str, outputs: Iterable[tuple[Any, bytes]], truth: Counter[str]) -> int:
    """Checks a run's outputs ``(id or str(id), JSON count)``: each id's counts come as 1, 2, 3...
    in order, and end at its number of messages. Returns how many outputs there were."""
    last: dict[str, int] = {}
    total = 0
    for key, value in outputs:
        k = str(key)
        c = _dec.decode(value)
        if c != last.get(k, 0) + 1:
            raise AssertionError(f"{system} W1: id {k} emitted count {c} after {last.get(k, 0)}")
        last[k] = c
        total += 1
    if last != dict(truth):
        wrong = sorted(k for k in set(last) | set(truth) if last.get(k) != truth.get(k))[:5]
        raise AssertionError(f"{system} W1: final counts differ from the true counts, e.g. "
                             f"{[(k, last.get(k), truth.get(k)) for k in wrong]}")
    return total


def best_of(repeats: int, fn: Any, *args: Any) -> float:
    """The shortest of ``repeats`` timed calls (one plain loop of ~0.5 s varies by +-25% on a
    shared machine; its best is the practical limit)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


# -- W2 ------------------------------------------------------------------------------------------

async def enrich(m: int) -> int:
    """W2's call: a remote lookup simulated by its latency."""
    await asyncio.sleep(W2_LATENCY)
    return m


def w2_bare_asyncio(n: int, c: int) -> float:
    """Seconds for a bare asyncio semaphore + gather to run ``n`` calls at most ``c`` at once."""
    async def main() -> None:
        sem = asyncio.Semaphore(c)

        async def one(m: int) -> int:
            async with sem:
                return await enrich(m)
        await asyncio.gather(*(one(m) for m in range(n)))
    t0 = time.perf_counter()
    asyncio.run(main())
    return time.perf_counter() - t0


def w2_check(system: str, outputs: Iterable[int], n: int) -> int:
    """Every message came out exactly once (in any order)."""
    got = sorted(outputs)
    if got != list(range(n)):
        raise AssertionError(f"{system} W2: {len(got)} outputs, not each of the {n} inputs once")
    return len(got)


# -- one run of one system, as a command ---------------------------------------------------------

W1Runner = Callable[[dict[int, list[tuple[str, bytes]]]], tuple[float, list[tuple[Any, bytes]]]]
W2Runner = Callable[[int, int], tuple[float, list[int]]]

BASELINE_REPEATS = 3


def run_one(system: str, version: str, w1: W1Runner, w2: W2Runner,
            argv: list[str] | None = None) -> dict[str, Any]:
    """``W1 MESSAGES`` or ``W2 MESSAGES CONCURRENCY``: runs the workload on ``system`` (``w1`` and
    ``w2`` return the timed seconds and the outputs), checks the outputs and prints one JSON line
    with the baseline measured in this same process."""
    args = sys.argv[1:] if argv is None else argv
    workload, n = args[0].upper(), int(args[1])
    if workload == "W1":
        parts = w1_messages(n)
        truth = w1_truth(parts)
        base_s = best_of(BASELINE_REPEATS, w1_plain_loop, parts)
        secs, outputs = w1(parts)
        checked = w1_check(system, outputs, truth)
        if checked != n:
            raise AssertionError(f"{system} W1: {checked} outputs for {n} messages")
        del outputs
        return emit("W1", {"messages": n, "partitions": W1_PARTITIONS}, n, secs,
                    "plain-python-loop", n / base_s, system=system, version=version,
                    baseline_repeats=BASELINE_REPEATS, outputs_checked=checked)
    if workload == "W2":
        c = int(args[2])
        secs, got = w2(n, c)
        w2_check(system, got, n)
        bare = w2_bare_asyncio(n, c)
        return emit("W2", {"messages": n, "concurrency": c}, n, secs, "bare-asyncio-gather",
                    n / bare, system=system, version=version,
                    limit_msgs_per_s=round(c / W2_LATENCY, 1),
                    ratio_to_limit=round(n / secs / (c / W2_LATENCY), 3), outputs_checked=n)
    raise SystemExit(f"unknown workload {workload!r}: W1 MESSAGES or W2 MESSAGES CONCURRENCY")
