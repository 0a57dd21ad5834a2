"""The Iceberg output's test job: events ``KV(id, {"id": n})`` on the local system, 4
partitions, each kept one (ids ending in 9 are dropped) a row of table ``lake.events`` (an
append-only table: a row written twice would show), in the catalog and warehouse under the
folder ``SAMZA_DSL_ICEBERG_LAKE`` names."""

from __future__ import annotations

import os

from samza_dsl import StreamApplication
from samza_dsl.iceberg import IcebergSystem
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

LAKE = os.environ.get("SAMZA_DSL_ICEBERG_LAKE", "lake")

app = StreamApplication("ice-crash")
local = LocalSystem("local")
events = app.input(local.input("events", serde=KVSerde(StringSerde(), JsonSerde()),
                               partitions=4))
lake = IcebergSystem("lake", catalog_uri=f"sqlite:///{os.path.abspath(LAKE)}/catalog.db",
                     warehouse=os.path.join(LAKE, "warehouse"))
rows = app.output(lake.table_output("event-rows", table="lake.events",
                                    schema={"id": "long", "part": "int"},
                                    columns={"id": "id", "part": lambda kv: int(kv.key) % 4}))
events.filter(lambda kv: kv.value["id"] % 10 != 9, name="keep").send_to(rows)
