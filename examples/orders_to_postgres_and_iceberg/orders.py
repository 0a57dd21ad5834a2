"""Order totals per customer and minute, from Kafka into PostgreSQL and Apache Iceberg, exactly
once. README.md beside this file runs it end to end.

``orders`` (a Kafka topic, 4 partitions) holds ``KV(order id, {"customer", "amount_cents",
"ts"})``, one per order, keyed by order id as the shop writes them (``ts``: event time, seconds).
The job

1. repartitions the orders by customer (``partition_by``), so each customer's orders meet in
   one task;
2. sums each customer's orders in tumbling windows of one minute of event time
   (``Windows.keyed_tumbling``, init/fold): a pane per (customer, minute) holding
   ``[orders, total in cents]``, fired once, when the minute is over;
3. makes each pane a row ``{"customer", "minute" (its start, ms), "orders", "total_cents"}``;
4. upserts each row into the PostgreSQL table ``customer_minute_totals`` (key ``customer,
   minute``), and appends it to the Iceberg table ``shop.customer_minute_totals`` (one snapshot
   per commit of a task).

The job runs with ``job.processing.guarantee=exactly-once``: each task's records into the
intermediate stream, its window's state and its checkpoint are one Kafka transaction per
commit. The PostgreSQL output writes a commit's rows with the input positions they cover in one
database transaction and upserts, so a replayed pane writes the same total again; the Iceberg
output stages a commit's data files before the checkpoint and appends them as one snapshot
after it, finishing at a restart an append a crash cut off (docs/connectors.md). After any
crash, each pane is a row of the Iceberg table once, and the PostgreSQL row of each (customer,
minute) holds its total.

Where it connects comes from the environment:

- ``KAFKA_BOOTSTRAP``: the brokers (default ``127.0.0.1:9092``);
- ``ORDERS_POSTGRES``: a libpq connection string (default
  ``host=127.0.0.1 port=5432 dbname=orders``); ``schema.sql`` makes the table;
- ``ORDERS_LAKE``: the folder of the Iceberg catalog (``catalog.db``, SQLite) and its warehouse
  (default ``lake``, in the directory the job runs in).

``sample_input(n)`` makes the sample (``orders.jsonl`` is ``sample_input(240)``), and
``expected_totals`` is what the tables hold after a run over it:

>>> orders = sample_input(3)
>>> orders[0]
KV(key='o-00000', value={'customer': 'c-chen', 'amount_cents': 2571, 'ts': 1767225600.0})
>>> totals = expected_totals(orders)
>>> totals[("c-chen", 1767225600000)]
(1, 2571)
>>> add_order(KV("o-1", {"amount_cents": 250}), [1, 100])
[2, 350]
>>> minute_of(KV("c-bo", {"minute": 1767225660000}))
datetime.datetime(2026, 1, 1, 0, 1, tzinfo=datetime.timezone.utc)
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from samza_dsl import KV, StreamApplication, WindowPane, Windows
from samza_dsl.iceberg import IcebergSystem
from samza_dsl.postgres import PostgresSystem
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

__all__ = ["app", "build_app", "sample_input", "expected_totals", "WINDOW", "PARTITIONS",
           "PG_TABLE", "ICEBERG_TABLE"]

WINDOW = timedelta(minutes=1)
PARTITIONS = 4
PG_TABLE = "customer_minute_totals"
ICEBERG_TABLE = "shop.customer_minute_totals"


def _json_kv() -> KVSerde:
    return KVSerde(StringSerde(), JsonSerde())


# -- user functions ------------------------------------------------------------------------------

def customer_of(order: KV[str, dict[str, Any]]) -> str:
    return str(order.value["customer"])


def order_value(order: KV[str, dict[str, Any]]) -> dict[str, Any]:
    return order.value


def order_time(order: KV[str, dict[str, Any]]) -> float:
    return float(order.value["ts"])


def customer_key(order: KV[str, Any]) -> str:
    return str(order.key)


def no_orders() -> list[int]:
    """The empty accumulator, ``[orders, total in cents]``."""
    return [0, 0]


def add_order(order: KV[str, dict[str, Any]], acc: list[int]) -> list[int]:
    return [acc[0] + 1, acc[1] + int(order.value["amount_cents"])]


def total_row(pane: WindowPane) -> KV[str, dict[str, Any]]:
    """A pane as a row: the customer, the start of its minute (ms), the count and the sum."""
    orders, total = pane.message
    return KV(pane.key.key, {"customer": pane.key.key, "minute": int(pane.key.pane_id),
                             "orders": orders, "total_cents": total})


def minute_of(row: KV[str, dict[str, Any]]) -> datetime:
    """The row's minute as a timestamp (``timestamptz`` in both tables)."""
    return datetime.fromtimestamp(row.value["minute"] / 1000, tz=UTC)


COLUMNS: dict[str, Any] = {"customer": "customer", "minute": minute_of, "orders": "orders",
                           "total_cents": "total_cents"}


# -- the application -----------------------------------------------------------------------------

def build_app(bootstrap: str, conninfo: str, lake: str) -> StreamApplication:
    """The job on the brokers at ``bootstrap``, writing to the database ``conninfo`` names and
    to the Iceberg catalog in folder ``lake``."""
    app = StreamApplication("order-totals", config={
        "job.default.system": "kafka",
        "job.processing.guarantee": "exactly-once",
        "task.commit.ms": 5000,
    })
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    orders = app.input(kafka.input("orders", serde=_json_kv(), partitions=PARTITIONS))

    pg = PostgresSystem("pg", conninfo=conninfo)
    to_postgres = app.output(pg.output_table(
        "totals-postgres", table=PG_TABLE, columns=COLUMNS, key=["customer", "minute"],
        upsert=True))

    lake_dir = os.path.abspath(lake)
    iceberg = IcebergSystem("lake", catalog_uri=f"sqlite:///{lake_dir}/catalog.db",
                            warehouse=os.path.join(lake_dir, "warehouse"))
    to_iceberg = app.output(iceberg.table_output(
        "totals-iceberg", table=ICEBERG_TABLE,
        schema={"customer": "string", "minute": "timestamptz", "orders": "long",
                "total_cents": "long"}, columns=COLUMNS))

    rows = (
        orders.partition_by(customer_of, order_value, serde=_json_kv(), name="by-customer")
        .window(Windows.keyed_tumbling(customer_key, WINDOW, init=no_orders, fold=add_order,
                                       event_time=order_time), name="per-minute")
        .map(total_row, name="total-row")
    )
    rows.send_to(to_postgres)
    rows.send_to(to_iceberg)
    return app


app = build_app(os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
                os.environ.get("ORDERS_POSTGRES", "host=127.0.0.1 port=5432 dbname=orders"),
                os.environ.get("ORDERS_LAKE", "lake"))


# -- sample input and what it gives ---------------------------------------------------------------

START = 1_767_225_600  # 2026-01-01 00:00:00 UTC: the sample's first order
CUSTOMERS = ["c-ana", "c-bo", "c-chen", "c-dee", "c-eli", "c-femi"]


def sample_input(n: int, seed: int = 7) -> list[KV[str, dict[str, Any]]]:
    """``n`` orders of six customers, 1 to 9 s apart in event time, amounts 1.00 to 99.99; the
    same ``n`` and ``seed`` give the same list."""
    rng = random.Random(seed)
    ts = float(START)
    out: list[KV[str, dict[str, Any]]] = []
    for i in range(n):
        out.append(KV(f"o-{i:05d}", {"customer": rng.choice(CUSTOMERS),
                                     "amount_cents": rng.randint(100, 9999), "ts": ts}))
        ts += rng.randint(1, 9)
    return out


def expected_totals(orders: Iterable[KV[str, dict[str, Any]]]
                    ) -> dict[tuple[str, int], tuple[int, int]]:
    """``{(customer, minute start in ms): (orders, total in cents)}``, in plain Python."""
    out: dict[tuple[str, int], tuple[int, int]] = {}
    size = int(WINDOW.total_seconds())
    for order in orders:
        minute = int(order.value["ts"]) // size * size * 1000
        n, total = out.get((order.value["customer"], minute), (0, 0))
        out[(order.value["customer"], minute)] = (n + 1, total + int(order.value["amount_cents"]))
    return out


if __name__ == "__main__":
    print(app.plan().explain())
