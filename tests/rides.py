"""Issue 62's newcomer's case: trip requests joined with their acceptances within 60 s of event
time, over input with up to 4 s of disorder (each input declares ``event_time`` and
``max_out_of_orderness`` of 5 s), as one application built on any system. Every runner must
give ``expected``: each pair of a request and an acceptance of the same rider at most 60 s
apart, in either order (an acceptance may pair with another request of its rider).

The same newcomer's other application (``build_sessions``): trips, keyed by rider, go through
``partition_by`` driver, ``join_table`` with a table of drivers that a side input fills, and a
session window per driver (a 10 min gap of event time), whose panes go to every output given.
Every runner must give ``expected_sessions``: each driver's sessions, with the trips, fares and
the driver's cut of each.

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
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from operators.hashing import partition_for
from samza_dsl import KV, StreamApplication, Windows
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


# -- the trips' sessions ---------------------------------------------------------------------------

#: a driver's session ends 10 min of event time after its last trip
GAP = timedelta(minutes=10)
#: the cut of a driver absent from the drivers' table, in percent
DEFAULT_CUT = 25
SESSIONS = "rides-sessions"


def driver_rows(drivers: int = 300, seed: int = 63) -> list[KV[str, Any]]:
    """The side input's rows: each driver's cut in percent, but every tenth driver has none."""
    rng = random.Random(seed)
    return [KV(f"d{i}", {"cut": rng.choice([15, 20, 25, 30])}) for i in range(drivers)
            if i % 10 != 7]


def trips(n: int = 48_000, drivers: int = 300, riders: int = 5_000, seed: int = 63
          ) -> list[KV[str, Any]]:
    """``n`` trips, keyed by rider, in event-time order. Each driver works in shifts of 1 to 6
    trips 1 to 8 min apart, with 20 to 90 min between shifts, so each shift is a session of its
    own whatever the disorder: ``{"id", "driver", "t" (ms), "fare" (cents)}``."""
    rng = random.Random(seed)
    made: list[tuple[int, str, int]] = []
    per = n // drivers + 1
    for d in range(drivers):
        t = T0_MS + rng.randint(0, 3_600_000)
        left = per
        while left:
            for _ in range(min(left, rng.randint(1, 6))):
                made.append((t, f"d{d}", rng.randint(500, 6_000)))
                left -= 1
                t += rng.randint(60_000, 480_000)
            t += rng.randint(1_200_000, 5_400_000)
    made.sort()
    return [KV(f"rider{rng.randrange(riders)}",
               {"id": f"t{i}", "driver": driver, "t": t, "fare": fare})
            for i, (t, driver, fare) in enumerate(made[:n])]


def trip_inputs(n: int = 48_000, seed: int = 63) -> dict[str, dict[int, list[KV[str, Any]]]]:
    """The trips, disordered and placed by rider, and the drivers' rows placed by driver."""
    return {"trips": placed(disordered(trips(n, seed=seed), seed + 1)),
            "driver-updates": placed(driver_rows(seed=seed))}


def _cut_of(trip: KV[str, Any], driver: KV[str, Any] | None) -> KV[str, Any]:
    cut = driver.value["cut"] if driver is not None else DEFAULT_CUT
    return KV(trip.key, {"t": trip.value["t"], "fare": trip.value["fare"],
                         "cut": trip.value["fare"] * cut // 100})


def _no_trips() -> dict[str, int]:
    return {"trips": 0, "fares": 0, "cut": 0}


def _add_trip(kv: KV[str, Any], acc: dict[str, int]) -> dict[str, int]:
    return {"trips": acc["trips"] + 1, "fares": acc["fares"] + kv.value["fare"],
            "cut": acc["cut"] + kv.value["cut"]}


def _session_row(pane: Any) -> KV[str, Any]:
    return KV(pane.key.key, {"driver": pane.key.key, "start": int(pane.key.pane_id),
                             **pane.message})


def build_sessions(system: Any, name: str = SESSIONS, tag: str = "",
                   outputs: Iterable[Any] = (), late_to: Any = None,
                   config: dict[str, Any] | None = None) -> StreamApplication:
    """Trips -> ``partition_by`` driver -> ``join_table`` drivers (a side input fills it) ->
    a session window per driver -> ``KV(driver, {"driver", "start" (ms), "trips", "fares",
    "cut"})`` into output ``sessions`` on ``system`` and into each of ``outputs`` (output
    descriptors of other systems, a PostgreSQL table's); late messages to ``late_to``."""
    app = StreamApplication(name, config=config or {})

    def named(sid: str) -> dict[str, Any]:
        return {"physical_name": f"{sid}-{tag}"} if tag else {}

    drivers = app.table("drivers", serde=SERDE, processor=lambda kv: [kv], side_inputs=[
        system.input("driver-updates", serde=SERDE, partitions=PARTITIONS,
                     **named("driver-updates"))])
    rows = (app.input(system.input("trips", serde=SERDE, partitions=PARTITIONS,
                                   event_time=event_time, max_out_of_orderness=BOUND,
                                   **named("trips")))
            .partition_by(lambda kv: kv.value["driver"], lambda kv: kv.value, serde=SERDE,
                          name="by-driver")
            .join_table(drivers, combine=_cut_of, name="cut")
            .window(Windows.keyed_session(lambda kv: kv.key, GAP, init=_no_trips,
                                          fold=_add_trip, event_time=event_time),
                    name="sessions",
                    **({"late_to": app.output(late_to)} if late_to is not None else {}))
            .map(_session_row, name="row"))
    rows.send_to(app.output(system.output("sessions", serde=SERDE, partitions=1,
                                          **named("sessions"))))
    for out in outputs:
        rows.send_to(app.output(out))
    return app


def expected_sessions(given: dict[str, dict[int, list[KV[str, Any]]]]
                      ) -> dict[tuple[str, int], dict[str, int]]:
    """The plain-Python answer: per (driver, session start in ms), its trips, fares and cut;
    a driver's trips in event-time order make one session until one comes ``GAP`` or more
    after the one before."""
    cuts = {kv.key: kv.value["cut"] for msgs in given["driver-updates"].values() for kv in msgs}
    by_driver: dict[str, list[dict[str, Any]]] = {}
    for msgs in given["trips"].values():
        for kv in msgs:
            by_driver.setdefault(kv.value["driver"], []).append(kv.value)
    gap = GAP.total_seconds() * 1000
    out: dict[tuple[str, int], dict[str, int]] = {}
    for driver, ts in by_driver.items():
        cut = cuts.get(driver, DEFAULT_CUT)
        start = last = None
        for trip in sorted(ts, key=lambda v: v["t"]):
            if last is None or trip["t"] - last >= gap:
                start = trip["t"]
                out[(driver, start)] = _no_trips()
            assert start is not None
            acc = out[(driver, start)]
            acc["trips"] += 1
            acc["fares"] += trip["fare"]
            acc["cut"] += trip["fare"] * cut // 100
            last = trip["t"]
    return out


def flush_trips(after_ms: int = 30 * 86_400_000) -> dict[int, list[KV[str, Any]]]:
    """One trip on each input partition, ``after_ms`` past every other (a driver of no table
    row, its own): in a job that never ends (``--follow``), it moves every partition's event time
    past every session, so every session closes, as the end of a bounded run closes them."""
    out: dict[int, list[KV[str, Any]]] = {}
    i = 0
    while len(out) < PARTITIONS:
        rider = f"flush{i}"
        p = partition_for(rider.encode("utf-8"), PARTITIONS)
        if p not in out:
            out[p] = [KV(rider, {"id": f"flush{p}", "driver": f"flush-{p}",
                                 "t": T0_MS + after_ms, "fare": 0})]
        i += 1
    return out
