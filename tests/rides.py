"""Issue 62's newcomer's case: trip requests joined with their acceptances within 60 s of event
time, over input with up to 4 s of disorder (each input declares ``event_time`` and
``max_out_of_orderness`` of 5 s), as one application built on any system. Every runner must
give ``expected``: each pair of a request and an acceptance of the same rider at most 60 s
apart, in either order (an acceptance may pair with another request of its rider).

The inputs are keyed by rider, each message in its key's partition (murmur2 of the key, as a
producer places it), each partition's messages in the order a disordered producer wrote them:
sorted by event time plus up to ``DISORDER_MS`` of jitter, so a message is at most that far
behind one written before it. Within the inputs' bound nothing is late, on any runner and in any
interleaving of the partitions.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import timedelta
from typing import Any

from operators.hashing import partition_for
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde

PARTITIONS = 4
WITHIN = timedelta(seconds=60)
BOUND = timedelta(seconds=5)
DISORDER_MS = 4_000
T0_MS = 1_700_000_000_000
SERDE = KVSerde(StringSerde(), JsonSerde())
#: the join's operator id in an application built by ``build`` (its name is ``rides``)
JOIN = "rides-1-join-accepted"


def event_time(kv: KV[str, Any]) -> float:
    return float(kv.value["t"]) / 1000.0


def build(system: Any, name: str = "rides", tag: str = "") -> StreamApplication:
    """The application on ``system``; ``tag`` gives its streams physical names of their own
    (``<id>-<tag>``), for runs sharing one broker."""
    app = StreamApplication(name)

    def named(sid: str) -> dict[str, Any]:
        return {"physical_name": f"{sid}-{tag}"} if tag else {}

    def read(sid: str) -> Any:
        return app.input(system.input(sid, serde=SERDE, partitions=PARTITIONS,
                                      event_time=event_time, max_out_of_orderness=BOUND,
                                      **named(sid)))
    (read("requests")
     .join(read("acceptances"), key=lambda kv: kv.key, other_key=lambda kv: kv.key,
           combine=lambda r, a: {"request": r.value["id"], "acceptance": a.value["id"],
                                 "dt_ms": a.value["t"] - r.value["t"]},
           within=WITHIN, name="accepted")
     .send_to(app.output(system.output("accepted", serde=JsonSerde(), partitions=1,
                                       **named("accepted")))))
    return app


def events(requests: int = 2_000, riders: int = 150, seed: int = 62
           ) -> tuple[list[KV[str, Any]], list[KV[str, Any]]]:
    """Requests about a second apart, each of a random rider, and an acceptance for most of
    them 1 to 90 s later (so some more than 60 s after their request); both in event-time
    order."""
    rng = random.Random(seed)
    reqs: list[KV[str, Any]] = []
    accs: list[KV[str, Any]] = []
    t = T0_MS
    for i in range(requests):
        t += rng.randint(0, 2_000)
        rider = f"rider{rng.randrange(riders)}"
        reqs.append(KV(rider, {"id": f"q{i}", "t": t}))
        if rng.random() < 0.9:
            accs.append(KV(rider, {"id": f"a{i}", "t": t + rng.randint(1_000, 90_000)}))
    accs.sort(key=lambda kv: kv.value["t"])
    return reqs, accs


def disordered(messages: list[KV[str, Any]], seed: int) -> list[KV[str, Any]]:
    """The messages as a producer with up to ``DISORDER_MS`` of disorder writes them."""
    rng = random.Random(seed)
    return sorted(messages, key=lambda kv: kv.value["t"] + rng.uniform(0, DISORDER_MS))


def placed(messages: list[KV[str, Any]]) -> dict[int, list[KV[str, Any]]]:
    """Each message in its key's partition, in order."""
    out: dict[int, list[KV[str, Any]]] = {p: [] for p in range(PARTITIONS)}
    for kv in messages:
        out[partition_for(kv.key.encode("utf-8"), PARTITIONS)].append(kv)
    return out


def inputs(requests: int = 2_000, seed: int = 62) -> dict[str, dict[int, list[KV[str, Any]]]]:
    """Both inputs, disordered and placed."""
    reqs, accs = events(requests, seed=seed)
    return {"requests": placed(disordered(reqs, seed + 1)),
            "acceptances": placed(disordered(accs, seed + 2))}


def expected(given: dict[str, dict[int, list[KV[str, Any]]]]) -> Counter[str]:
    """The plain-Python answer: every (request, acceptance) of a rider at most 60 s apart."""
    reqs = [kv for msgs in given["requests"].values() for kv in msgs]
    accs = [kv for msgs in given["acceptances"].values() for kv in msgs]
    within = WITHIN.total_seconds() * 1000
    return Counter(key({"request": r.value["id"], "acceptance": a.value["id"],
                        "dt_ms": a.value["t"] - r.value["t"]})
                   for r in reqs for a in accs
                   if r.key == a.key and abs(a.value["t"] - r.value["t"]) <= within)


def key(row: Any) -> str:
    return json.dumps(row, sort_keys=True)


def outputs(rows: list[Any]) -> Counter[str]:
    return Counter(map(key, rows))
