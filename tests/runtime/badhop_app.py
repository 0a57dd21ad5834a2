"""A job whose function fails on one record after a ``partition_by`` (``test_bad_record_after_hop.py``
and ``docs/operations.md``, "A bad record"). Its input ``trips`` holds ``{"driver": d, "fare": f}``
trips; one of them has no fare. They are repartitioned by driver, and each driver's fares are
kept, in the order applied, in the table ``fares`` (an LMDB store with a changelog); each trip
applied emits ``KV(driver, fares so far)``. ``user.trips.sleep.ms`` makes the step before the
hop sleep that long per trip, so that the function after the hop fails while the step before it
is still at work (and has no checkpoint past the bad trip). With ``BADHOP_KAFKA`` (a bootstrap
address) its streams are topics of that broker, named with the suffix ``BADHOP_TAG``.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from samza_dsl import KV, Context, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem, LocalSystem

__all__ = ["app", "picky", "sessions", "sample_input"]


class Pace:
    def init(self, ctx: Context) -> None:
        self.pause = float(ctx.config.get("user.trips.sleep.ms", 0)) / 1000.0

    def __call__(self, trip: dict[str, Any]) -> dict[str, Any]:
        if self.pause:
            time.sleep(self.pause)
        return trip


class Fares:
    """The driver's fares so far, kept in the table ``fares``."""

    def init(self, ctx: Context) -> None:
        self.table = ctx.table("fares")

    def __call__(self, trip: KV[str, dict[str, Any]]) -> KV[str, list[int]]:
        fare = int(trip.value["fare"])  # a trip with no fare raises KeyError here
        fares = [*(self.table.get(trip.key) or []), fare]
        self.table.put(trip.key, fares)
        return KV(trip.key, fares)


KAFKA = os.environ.get("BADHOP_KAFKA")
TAG = os.environ.get("BADHOP_TAG", "")
system: KafkaSystem | LocalSystem = (LocalSystem("local") if KAFKA is None
                                     else KafkaSystem("kafka", bootstrap_servers=KAFKA))
serde = KVSerde(StringSerde(), JsonSerde())
app = StreamApplication(f"fares{TAG}",
                        config={"job.default.system": system.name})
app.table("fares", serde=serde)
trips = app.input(system.input("trips", serde=JsonSerde(), partitions=2,
                               physical_name=f"trips{TAG}"))
trips.map(Pace(), name="pace").partition_by(lambda t: t["driver"], name="by-driver") \
    .map(Fares(), name="fares").send_to(app.output(system.output(
        "totals", serde=serde, physical_name=f"totals{TAG}")))



class FaresOnly(JsonSerde[Any]):
    """The hop's serde of ``picky``: it reads back only trips with a fare (as a serde of a newer
    schema would refuse a record of an older one)."""

    def deserialize(self, data: bytes) -> Any:
        trip = super().deserialize(data)
        if "fare" not in trip:
            raise ValueError("a trip without a fare")
        return trip


#: the same job with a hop whose serde cannot read the bad trip back: that record follows the
#: intermediate stream's ``samza.serde.error`` policy
picky = StreamApplication(f"picky{TAG}", config={"job.default.system": system.name})
picky.table("fares", serde=serde)
picky.input(system.input("trips", serde=JsonSerde(), partitions=2, physical_name=f"trips{TAG}")) \
    .map(Pace(), name="pace").partition_by(lambda t: t["driver"], serde=KVSerde(StringSerde(), FaresOnly()),
                  name="by-driver") \
    .map(Fares(), name="fares").send_to(picky.output(system.output(
        "totals", serde=serde, physical_name=f"picky-totals{TAG}")))

def _trip_time(kv: KV[str, dict[str, Any]]) -> float:
    return float(kv.value["t"])


def _add_fare(kv: KV[str, dict[str, Any]], total: int) -> int:
    return total + int(kv.value["fare"])  # a trip with no fare raises KeyError here


#: the same trips into a session window per driver (event time ``t``, 30 s apart, a gap of
#: 10 min: one session per driver), which holds each trip until the watermark passes it and
#: folds it in then: the fold fails on the bad trip while the task has another message in hand
sessions = StreamApplication(f"sessions{TAG}", config={"job.default.system": system.name})
sessions.input(system.input("trips", serde=JsonSerde(), partitions=2,
                            physical_name=f"trips{TAG}",
                            event_time=lambda t: float(t["t"]),
                            max_out_of_orderness=timedelta(seconds=5))) \
    .partition_by(lambda t: t["driver"], name="by-driver") \
    .window(Windows.keyed_session(lambda kv: kv.key, timedelta(minutes=10), init=lambda: 0,
                                  fold=_add_fare, event_time=_trip_time), name="sessions") \
    .map(lambda pane: KV(pane.key.key, pane.message), name="total") \
    .send_to(sessions.output(system.output("totals", serde=serde,
                                           physical_name=f"session-totals{TAG}")))

T0 = 1_700_000_000
#: the trip with no fare: the 31st of the sample (partition 0 offset 15, as `--sample` spreads it)
BAD = 30


def sample_input(n: int) -> dict[str, list[dict[str, Any]]]:
    return {"trips": [{"driver": f"d{i % 7}", "t": T0 + 30 * i} if i == BAD else
                      {"driver": f"d{i % 7}", "t": T0 + 30 * i, "fare": i} for i in range(n)]}
