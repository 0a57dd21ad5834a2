"""Joins of the issue that joined 235 of 1,000 pairs and left 774 of 1,000 lookups None, with no
word said: ``orders`` is keyed by user, ``payments`` and ``users-in`` by their own ids.

- ``pairs``: ``orders`` joined with ``payments`` on the order id, with no ``partition_by`` first;
- ``fixed``: the same join after ``orders.partition_by(order id)``: every pair meets;
- ``lookups``: ``orders`` keyed by order id, ``join_table`` on the user (a table keyed by user);
- ``broadcast_lookups``: the same lookups into a table every task holds whole (written from a
  broadcast stream): they all hit;
- ``side_lookups``: the same lookups into a table filled from a side input keyed by user;
- ``elastic``: ``pairs`` with one partition per input and two virtual tasks per task.

The inputs: ``inputs()`` (1,000 orders, payments and 37 users, as the local system loads them:
each by its key)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

N = 1000
USERS = 37
SERDE = KVSerde(StringSerde(), JsonSerde())
LOCAL = LocalSystem("local")


def order_id(kv: KV[str, dict[str, Any]]) -> Any:
    return kv.value["order_id"]


def _app(name: str, **config: Any) -> StreamApplication:
    return StreamApplication(name, config={"job.default.system": "local", **config})


def pairs(partitions: int = 4, fix: bool = False, **config: Any) -> StreamApplication:
    app = _app("fixed" if fix else "pairs", **config)
    orders = app.input(LOCAL.input("orders", serde=SERDE, partitions=partitions))
    payments = app.input(LOCAL.input("payments", serde=SERDE, partitions=partitions))
    left = orders.partition_by(order_id, lambda kv: kv.value, serde=SERDE, name="by-order") \
        if fix else orders
    left.join(payments, key=lambda kv: kv.value["order_id"], other_key=lambda kv: kv.key,
              combine=lambda o, p: KV(p.key, {"user": o.value["user"], **p.value}),
              ttl=timedelta(minutes=10), name="paid") \
        .send_to(app.output(LOCAL.output("paid", serde=SERDE, partitions=partitions)))
    return app


def lookups(table: str = "local", **config: Any) -> StreamApplication:
    """``table``: ``local`` (written from ``users-in``), ``broadcast`` (from its broadcast) or
    ``side`` (a side input)."""
    app = _app(f"lookups-{table}", **config)
    users_in = LOCAL.input("users-in", serde=SERDE, partitions=4)
    if table == "side":
        users = app.table("users", serde=SERDE, side_inputs=[users_in], processor=lambda kv: [kv])
    else:
        users = app.table("users", serde=SERDE)
        stream = app.input(users_in)
        if table == "broadcast":
            stream = stream.broadcast(serde=SERDE, name="all-users")
        stream.send_to(users)
    (app.input(LOCAL.input("orders-by-id", serde=SERDE, partitions=4))
     .join_table(users, key=lambda kv: kv.value["user"],
                 combine=lambda o, u: KV(o.key, None if u is None else u.value["name"]),
                 name="with-user")
     .send_to(app.output(LOCAL.output("named", serde=SERDE, partitions=4))))
    return app


def inputs() -> dict[str, list[KV[str, dict[str, Any]]]]:
    orders = [(f"user-{i % USERS}", f"o-{i}") for i in range(N)]
    return {
        "orders": [KV(u, {"order_id": o, "user": u}) for u, o in orders],
        "payments": [KV(f"o-{i}", {"amount": i}) for i in range(N)],
        "orders-by-id": [KV(o, {"order_id": o, "user": u}) for u, o in orders],
        "users-in": [KV(f"user-{u}", {"name": f"name-{u}"}) for u in range(USERS)],
    }


app = pairs()
fixed = pairs(fix=True)
table_app = lookups()
