"""The cost of ``max_event_time_ahead`` where records are decoded (``StreamCodec.decode_batch``):
ns per message of a 1000-record batch of JSON ``KV`` records, without the bound (one ``is None``
per batch) and with it (one ``event_time`` call and one comparison per message, the clock read
once per batch). Best of several rounds: the machine may be shared.

    .venv/bin/python -m benchmarks.event_time_ahead
"""

from __future__ import annotations

import time
from datetime import timedelta

from runtime.engine.codec import StreamCodec
from runtime.engine.event_time_ahead import ahead_rule
from runtime.engine.job import SSP
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

SERDE = KVSerde(StringSerde(), JsonSerde())
RECORDS = [(f"k{i}".encode(), b'{"ts":%d,"page":"/home","country":"NL"}' % i, None)
           for i in range(1000)]


def ns_per_message(codec: StreamCodec, rounds: int = 8, batches: int = 400) -> float:
    ssp = SSP("views", 0)
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(batches):
            codec.decode_batch(ssp, 0, RECORDS, 0)
        best = min(best, (time.perf_counter() - t) / batches / len(RECORDS) * 1e9)
    return best


def main() -> None:
    views = LocalSystem().input("views", serde=SERDE, event_time=lambda kv: kv.value["ts"],
                                max_event_time_ahead=timedelta(hours=1))
    off = StreamCodec("views", SERDE)
    on = StreamCodec("views", SERDE, policy="skip", ahead=ahead_rule("views", views, "skip"))
    print(f"decode without max_event_time_ahead: {ns_per_message(off):.0f} ns/message")
    print(f"decode with max_event_time_ahead:    {ns_per_message(on):.0f} ns/message")


if __name__ == "__main__":
    main()
