"""Side inputs (``app.table(..., side_inputs=[...], processor=fn)``, docs/semantics.md "Bootstrap
and priority inputs"): a table filled from streams, read before the task's other inputs, restored
by reading them again; in memory, on the local system across a restart, and on Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime import LocalRunner
from runtime.local.system import LocalJob
from runtime.spark import SparkRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import PlanError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem, MemorySystem
from samza_dsl.testing import TestRunner

SERDE = KVSerde(StringSerde(), JsonSerde())
USERS = 12


def countries(update: KV[str, dict[str, Any]]) -> list[KV[str, Any]]:
    """The processor: a user's country, and a count per country; a deleted user goes."""
    if update.value.get("deleted"):
        return [KV(update.key, None)]
    return [KV(update.key, update.value["country"]), KV("#" + update.value["country"], 1)]


def build(system: Any, suffix: str = "", name: str = "side") -> StreamApplication:
    app = StreamApplication(name)
    users = app.table("users", serde=SERDE, processor=countries, side_inputs=[
        system.input("user-updates", serde=SERDE, partitions=2,
                     physical_name="user-updates" + suffix)])
    out = app.output(system.output("out", serde=SERDE, partitions=2, physical_name="out" + suffix))
    (app.input(system.input("clicks", serde=SERDE, partitions=2, physical_name="clicks" + suffix))
     .join_table(users, combine=lambda m, u: KV(m.key, [m.value, None if u is None else u.value]),
                 name="enrich")
     .send_to(out))
    return app


UPDATES = [KV(f"u{i}", {"country": "NL" if i % 2 else "DE"}) for i in range(USERS)] \
    + [KV("u3", {"deleted": True})]
CLICKS = [KV(f"u{i % USERS}", i) for i in range(60)]


def expected(clicks: list[Any], table: dict[str, str]) -> list[Any]:
    return sorted((c.key, c.value, table.get(c.key)) for c in clicks)


TABLE = {f"u{i}": "NL" if i % 2 else "DE" for i in range(USERS) if i != 3}


def rows(out: list[Any]) -> list[Any]:
    return sorted((m.key, m.value[0], m.value[1]) for m in out)


def test_every_message_sees_the_whole_side_input_in_memory() -> None:
    runner = TestRunner(build(MemorySystem()))
    runner.add_input("clicks", CLICKS).add_input("user-updates", UPDATES)
    assert rows(runner.run().messages("out")) == expected(CLICKS, TABLE)


def test_a_restart_restores_the_table_from_its_side_input(tmp_path: Path) -> None:
    app = build(LocalSystem("local"))
    config = {"job.dir": str(tmp_path)}
    first = LocalRunner(app, config, inputs={"clicks": CLICKS, "user-updates": UPDATES}).run()
    try:
        assert rows(first.messages("out")) == expected(CLICKS, TABLE)
    finally:
        first.close()
    # while the job is down: u1 moves, u3 comes back, and more clicks come
    more = [KV("u1", {"country": "SE"}), KV("u3", {"country": "FR"})]
    clicks = [KV(f"u{i}", 100 + i) for i in range(USERS)]
    job = LocalJob(app, config, run=False)
    try:
        job.load("clicks", clicks)
        job.load("user-updates", more)
    finally:
        job.close()
    second = LocalRunner(app, config).run()
    try:
        assert rows(second.messages("out")) == expected(clicks, TABLE | {"u1": "SE", "u3": "FR"})
        # the side input was read again from its oldest record, the clicks from the checkpoint
        assert second.status()["read"] == {"user-updates": len(UPDATES) + 2, "clicks": USERS}
    finally:
        second.close()


def test_spark_reads_the_side_input_before_the_pass(spark: Any) -> None:
    result = SparkRunner(spark).reprocess(build(MemorySystem()),
                                          {"clicks": CLICKS, "user-updates": UPDATES})
    assert rows(result.messages("out")) == expected(CLICKS, TABLE)


def test_a_side_input_table_has_no_changelog_and_its_input_is_marked() -> None:
    app = build(MemorySystem())
    spec = app.spec()
    assert spec.tables["users"].changelog is False
    assert spec.inputs["user-updates"].side_input_of == "users"


@pytest.mark.parametrize(("kw", "error", "exc"), [
    ({"processor": countries}, "go together", PlanError),
    ({"side_inputs": [MemorySystem().input("a")]}, "go together", PlanError),
    ({"side_inputs": [MemorySystem().input("a")], "processor": 3}, "processor must be callable",
     TypeError),
    ({"side_inputs": [MemorySystem().input("a")], "processor": countries, "changelog": True},
     "no changelog", PlanError),
    ({"side_inputs": [MemorySystem().input("a", offset_default="upcoming")],
      "processor": countries}, "oldest offset", PlanError),
    ({"side_inputs": [MemorySystem().output("a")], "processor": countries},
     "descriptors from system.input", TypeError),
])
def test_bad_side_inputs_are_named(kw: dict[str, Any], error: str, exc: type) -> None:
    with pytest.raises(exc, match=error):
        StreamApplication("x").table("t", serde=SERDE, **kw)


def test_a_side_input_is_no_input_of_the_job_too() -> None:
    app = StreamApplication("x")
    d = MemorySystem().input("a", serde=SERDE)
    app.input(d)
    with pytest.raises(PlanError, match="already an input of the job"):
        app.table("t", serde=SERDE, side_inputs=[d], processor=countries)
