"""The plan warns where it can see that a join's key is not the key its stream is partitioned by
(``planner.placement``): in ``explain()``, in the plan's JSON, and in ``samza-dsl plan``; where
the key is the partition key, or the planner cannot tell, or every task holds the other side
whole, it says nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from planner.placement import checked_ports
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import ConfigError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem

MEM = MemorySystem()
SERDE = KVSerde(StringSerde(), JsonSerde())
REPO = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "samza-dsl"
TTL = timedelta(minutes=10)


def join_app(left_key: Any, partitions: int = 4, before: str = "", **config: Any
             ) -> StreamApplication:
    """orders (keyed by user) joined with payments (keyed by order id) on ``left_key``;
    ``before``: "partition_by", "map" or "filter" on the orders first."""
    app = StreamApplication("shop", config=config)
    orders = app.input(MEM.input("orders", serde=SERDE, partitions=partitions))
    payments = app.input(MEM.input("payments", serde=SERDE, partitions=partitions))
    if before == "partition_by":
        orders = orders.partition_by(lambda kv: kv.value["order_id"], lambda kv: kv.value,
                                     name="by-order")
    elif before == "map":
        orders = orders.map(lambda kv: KV(kv.value["order_id"], kv.value), name="rekey")
    elif before == "filter":
        orders = orders.filter(lambda kv: kv.value is not None, name="some")
    orders.join(payments, key=left_key, other_key=lambda kv: kv.key,
                combine=lambda o, p: o, ttl=TTL, name="paid").sink(print, name="out")
    return app


def test_a_join_on_a_value_field_of_a_stream_keyed_otherwise_warns_in_explain() -> None:
    plan = join_app(lambda kv: kv.value["order_id"]).plan()
    assert len(plan.warnings) == 1
    warning = plan.warnings[0]
    assert warning.startswith("join 'shop-1-join-paid': its left key kv.value['order_id'] is not "
                              "the key stream 'orders' is partitioned by (its KV key, kv.key)")
    assert ".partition_by(lambda kv: kv.value['order_id'], name=...) before the join" in warning
    assert "task.join.partition.check" in warning
    text = plan.explain()
    assert "Warnings:\n  " + warning in text
    assert plan.to_dict()["warnings"] == [warning]
    assert json.loads(plan.to_json())["warnings"] == [warning]


def test_through_a_filter_the_stream_is_still_the_one_partitioned_by_its_key() -> None:
    assert len(join_app(lambda kv: kv.value["order_id"], before="filter").plan().warnings) == 1
    assert join_app(lambda kv: kv.key, before="filter").plan().warnings == []


@pytest.mark.parametrize("case", ["kv.key", "str(kv.key)", "partition_by", "partition_by key",
                                  "one partition", "after a map", "a branch"])
def test_no_warning_where_the_key_is_the_partition_key_or_cannot_be_told(case: str) -> None:
    value_key = lambda kv: kv.value["order_id"]  # noqa: E731
    app = {
        "kv.key": lambda: join_app(lambda kv: kv.key),
        "str(kv.key)": lambda: join_app(lambda kv: str(kv.key)),
        # the value keeps the field the partition_by keyed by: the same key
        "partition_by": lambda: join_app(value_key, before="partition_by"),
        "partition_by key": lambda: join_app(lambda kv: kv.key, before="partition_by"),
        "one partition": lambda: join_app(value_key, partitions=1),
        # a map may re-key the stream: the planner cannot tell; the run checks
        "after a map": lambda: join_app(lambda kv: kv.key, before="map"),
        "a branch": lambda: join_app(lambda kv: kv.value["a"] if kv.value else kv.key),
    }[case]()
    assert app.plan().warnings == []


def test_virtual_tasks_split_one_partition_by_key() -> None:
    app = join_app(lambda kv: kv.value["order_id"], partitions=1,
                   **{"job.elasticity.factor": 2})
    assert len(app.plan().warnings) == 1


def lookup_app(table: str, key: Any) -> StreamApplication:
    app = StreamApplication("lookups")
    orders = app.input(MEM.input("orders", serde=SERDE, partitions=4))
    users_in = app.input(MEM.input("users-in", serde=SERDE, partitions=4))
    if table == "remote":
        async def read(k: Any) -> Any:
            return None
        users: Any = app.remote_table("users", read=read)
    else:
        users = app.table("users", serde=SERDE)
        (users_in.broadcast(name="all") if table == "broadcast" else users_in).send_to(users)
    if table == "remote":
        users_in.sink(print, name="drop")
    orders.join_table(users, key=key, combine=lambda o, u: o, name="with-user") \
        .sink(print, name="out")
    return app


def test_a_lookup_on_another_key_warns_and_names_the_table() -> None:
    plan = lookup_app("local", lambda kv: kv.value["user"]).plan()
    assert len(plan.warnings) == 1
    assert plan.warnings[0].startswith(
        "join_table 'lookups-1-join_table-with-user' on table 'users': its key "
        "kv.value['user'] is not the key stream 'orders' is partitioned by")
    assert "come back None" in plan.warnings[0]
    assert checked_ports(plan) == {"lookups-1-join_table-with-user": (True,)}
    assert lookup_app("local", None).plan().warnings == []  # the KV key


@pytest.mark.parametrize("table", ["broadcast", "remote"])
def test_a_table_every_task_holds_whole_is_exempt(table: str) -> None:
    plan = lookup_app(table, lambda kv: kv.value["user"]).plan()
    assert plan.warnings == []
    assert checked_ports(plan) == {"lookups-1-join_table-with-user": (False,)}


def test_a_join_with_a_broadcast_side_is_exempt() -> None:
    app = StreamApplication("b")
    orders = app.input(MEM.input("orders", serde=SERDE, partitions=4))
    rates = app.input(MEM.input("rates", serde=SERDE, partitions=4)).broadcast(name="all")
    orders.join(rates, key=lambda kv: kv.value["currency"], other_key=lambda kv: kv.key,
                combine=lambda o, r: o, ttl=TTL, name="rated").sink(print, name="out")
    plan = app.plan()
    assert plan.warnings == []
    assert checked_ports(plan) == {"b-1-join-rated": (False, False)}


def test_the_check_policy_is_a_checked_config_key() -> None:
    assert join_app(lambda kv: kv.key, **{"task.join.partition.check": "WARN"}) \
        .plan().config["task.join.partition.check"] == "warn"
    with pytest.raises(ConfigError) as err:
        join_app(lambda kv: kv.key, **{"task.join.partition.check": "warning"}).plan()
    assert "task.join.partition.check='warning' is not allowed: it must be one of fail, warn, off" in str(err.value)


APP_SOURCE = '''
from datetime import timedelta
from samza_dsl import StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

local = LocalSystem("local")
serde = KVSerde(StringSerde(), JsonSerde())
app = StreamApplication("shop")
orders = app.input(local.input("orders", serde=serde, partitions=4))
payments = app.input(local.input("payments", serde=serde, partitions=4))
orders.join(payments, key=lambda kv: kv.value["order_id"], other_key=lambda kv: kv.key,
            combine=lambda o, p: o, ttl=timedelta(minutes=1), name="paid").sink(print, name="o")
'''


def test_samza_dsl_plan_shows_the_warning(tmp_path: Path) -> None:
    (tmp_path / "shop.py").write_text(APP_SOURCE)
    text = subprocess.run([str(CLI), "plan", "shop.py:app"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "Warnings:\n  join 'shop-1-join-paid': its left key kv.value['order_id']" in text.stdout
    dot = subprocess.run([str(CLI), "plan", "shop.py:app", "--format", "json"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert dot.returncode == 0, dot.stderr
    assert dot.stderr.startswith("plan warning: join 'shop-1-join-paid': its left key")
    assert json.loads(dot.stdout)["warnings"][0].startswith("join 'shop-1-join-paid'")
