"""W1 and W2 on Bytewax, in memory, one worker (``bytewax.testing.run_main``), in its own venv.

    .peer-venvs/bytewax/bin/python -m benchmarks.peers.run_bytewax W1 1000000
    .peer-venvs/bytewax/bin/python -m benchmarks.peers.run_bytewax W2 20000 100

W1: a ``TestingSource`` over the messages (batches of 1,000), ``key_on`` the id, the count in
``stateful_map`` (Bytewax's in-memory keyed state), into a ``TestingSink``.
W2: Bytewax has no async operator; its way to await calls is ``flat_map_batch`` running a batch
(of ``c`` messages, the source's batch size) on an event loop with at most ``c`` calls in flight.
"""

from __future__ import annotations

import asyncio
import time
from importlib.metadata import version
from typing import Any

import bytewax.operators as op
import msgspec
from bytewax.dataflow import Dataflow
from bytewax.testing import TestingSink, TestingSource, run_main

from benchmarks.peers.workload import enrich, run_one

SOURCE_BATCH = 1_000
_dec = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()


def count(state: int | None, kv: tuple[str, bytes]) -> tuple[int, bytes]:
    _dec.decode(kv[1])["id"]  # W1 decodes each message, as the other systems do
    c = (state or 0) + 1
    return c, _enc.encode(c)


def w1(parts: dict[int, list[tuple[str, bytes]]]) -> tuple[float, list[Any]]:
    messages = [kv for msgs in parts.values() for kv in msgs]
    out: list[tuple[str, bytes]] = []
    flow = Dataflow("w1-readwrite")
    events = op.input("events", flow, TestingSource(messages, batch_size=SOURCE_BATCH))
    keyed = op.key_on("key", events, lambda kv: kv[0])
    counted = op.stateful_map("count", keyed, count)
    op.output("out", counted, TestingSink(out))
    t0 = time.perf_counter()
    run_main(flow)
    return time.perf_counter() - t0, out


def w2(n: int, c: int) -> tuple[float, list[int]]:
    loop = asyncio.new_event_loop()

    async def batch(items: list[int]) -> list[int]:
        sem = asyncio.Semaphore(c)

        async def one(m: int) -> int:
            async with sem:
                return await enrich(m)
        return list(await asyncio.gather(*(one(m) for m in items)))

    out: list[int] = []
    flow = Dataflow("w2-async")
    requests = op.input("requests", flow, TestingSource(range(n), batch_size=c))
    enriched = op.flat_map_batch("enrich", requests,
                                 lambda items: loop.run_until_complete(batch(items)))
    op.output("out", enriched, TestingSink(out))
    t0 = time.perf_counter()
    run_main(flow)
    secs = time.perf_counter() - t0
    loop.close()
    return secs, out


if __name__ == "__main__":
    run_one("bytewax", version("bytewax"), w1, w2)
