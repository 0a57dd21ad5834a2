"""Ride requests joined with acceptances within 60 s of event time (``join(..., within=)``), for the
event-time join tests on TestRunner, the embedded local system (with a crash) and Kafka.

Requests and acceptances are ``KV(driver, {"ride", "ts"})``; ``rides`` draws them with a bounded
disorder, ``pairs`` is the plain-Python answer: every request and acceptance of the same driver
at most ``within`` apart in event time. ``app`` is the job on the local system for the crash test
(``how`` from ``SAMZA_ETJOIN_HOW``, default "left"; ``pace_ms`` from
``SAMZA_ETJOIN_PACE_MS``)."""

from __future__ import annotations

import os
import random
import time
from datetime import timedelta
from typing import Any

from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde

__all__ = ["build", "rides", "pairs", "ride_time", "WITHIN_S", "BOUND_S", "app"]

WITHIN_S = 60
BOUND_S = 5


def ride_time(kv: KV[str, dict[str, Any]]) -> float:
    return float(kv.value["ts"])


def driver(kv: KV[str, Any]) -> str:
    return kv.key


def matched(req: KV[str, Any] | None, acc: KV[str, Any] | None) -> list[Any]:
    return [None if req is None else req.value["ride"], None if acc is None else acc.value["ride"]]


def build(system: Any, *, how: str = "inner", late_to: Any = None, partitions: int = 2,
          name: str = "rides", config: dict[str, Any] | None = None,
          pace_ms: float = 0.0, topics: dict[str, str] | None = None) -> StreamApplication:
    """The job: requests joined with acceptances of the same driver within ``WITHIN_S``; the
    inputs declare ``max_out_of_orderness=BOUND_S``; results to ``matches`` as
    ``[request ride, acceptance ride]`` (None for the missing side of a left/outer join).
    ``pace_ms``: each request waits that long before the join (a slow step, so that commits
    come between the batches of a run). ``topics``: stream id -> physical name."""
    app = StreamApplication(name, config=config or {})
    topics = topics or {}
    serde = KVSerde(StringSerde(), JsonSerde())
    bound = timedelta(seconds=BOUND_S)
    requests = app.input(system.input("requests", serde=serde, partitions=partitions,
                                      event_time=ride_time, max_out_of_orderness=bound,
                                      physical_name=topics.get("requests")))
    accepts = app.input(system.input("accepts", serde=serde, partitions=partitions,
                                     event_time=ride_time, max_out_of_orderness=bound,
                                     physical_name=topics.get("accepts")))
    if late_to is not None:
        late_to = app.output(system.output(late_to, partitions=partitions,
                                           physical_name=topics.get(late_to)))
    if pace_ms:
        requests = requests.map(_paced(pace_ms / 1000.0), name="paced")
    requests.join(accepts, key=driver, other_key=driver, combine=matched, name="accepted",
                  within=timedelta(seconds=WITHIN_S), how=how, late_to=late_to) \
        .send_to(app.output(system.output("matches", serde=JsonSerde(), partitions=partitions,
                                          physical_name=topics.get("matches"))))
    return app


def _paced(seconds: float) -> Any:
    def paced(kv: KV[str, Any]) -> KV[str, Any]:
        time.sleep(seconds)
        return kv
    return paced


def rides(rng: random.Random, n: int, *, disorder_s: float, start_ms: int = 1_700_000_000_000,
          drivers: int = 40) -> tuple[list[KV[str, Any]], list[KV[str, Any]]]:
    """``n`` requests 0 to 400 ms apart, each with 0 to 2 acceptances 10 s before to 90 s after
    it, of one of ``drivers`` drivers; each stream in the order of its event times plus up to
    ``disorder_s`` of noise (so a message is at most that far behind an earlier one)."""
    reqs: list[tuple[float, KV[str, Any]]] = []
    accs: list[tuple[float, KV[str, Any]]] = []
    t = start_ms
    for i in range(n):
        t += rng.randint(0, 400)
        d = f"d{rng.randrange(drivers)}"
        reqs.append((t + rng.uniform(0, disorder_s * 1000), KV(d, {"ride": i, "ts": t / 1000})))
        for j in range(rng.choice((0, 1, 1, 2))):
            ta = t + rng.randint(-10_000, 90_000)
            accs.append((ta + rng.uniform(0, disorder_s * 1000),
                         KV(d, {"ride": f"{i}.{j}", "ts": ta / 1000})))
    return ([kv for _, kv in sorted(reqs, key=lambda p: p[0])],
            [kv for _, kv in sorted(accs, key=lambda p: p[0])])


def pairs(reqs: list[KV[str, Any]], accs: list[KV[str, Any]], how: str = "inner",
          within_s: float = WITHIN_S) -> list[list[Any]]:
    """The plain-Python answer, sorted: every request and acceptance of one driver at most
    ``within_s`` apart; with ``how="left"`` each request with none as ``[ride, None]``."""
    by_driver: dict[str, list[KV[str, Any]]] = {}
    for a in accs:
        by_driver.setdefault(a.key, []).append(a)
    out: list[list[Any]] = []
    for r in reqs:
        met = [[r.value["ride"], a.value["ride"]] for a in by_driver.get(r.key, ())
               if abs(round(a.value["ts"] * 1000) - round(r.value["ts"] * 1000))
               <= within_s * 1000]
        out += met or ([[r.value["ride"], None]] if how == "left" else [])
    return sorted(out, key=repr)


def _local_app() -> StreamApplication:
    from samza_dsl.systems import LocalSystem

    return build(LocalSystem("local"), how=os.environ.get("SAMZA_ETJOIN_HOW", "left"),
                 partitions=4, name="etjoin", config={"task.commit.ms": 1000},
                 pace_ms=float(os.environ.get("SAMZA_ETJOIN_PACE_MS", "0")))


app = _local_app()
