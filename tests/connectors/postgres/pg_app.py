"""The PostgreSQL output's crash-test job: events ``KV(id, {"id": n})`` on the local system, 4
partitions, each a row of table ``events`` (plain inserts, no key: a row written twice would
show), in small COPY batches, on the database ``SAMZA_DSL_PG_CONNINFO`` names; a lost
connection is retried for ``SAMZA_DSL_PG_RETRY`` seconds (default 30)."""

from __future__ import annotations

import os

from samza_dsl import StreamApplication
from samza_dsl.postgres import PostgresSystem
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

app = StreamApplication("pg-crash")
local = LocalSystem("local")
events = app.input(local.input("events", serde=KVSerde(StringSerde(), JsonSerde()),
                               partitions=4))
pg = PostgresSystem("pg", conninfo=os.environ.get("SAMZA_DSL_PG_CONNINFO", "dbname=test"))
rows = app.output(pg.output_table("event-rows", table="events",
                                  columns={"id": "id", "task": lambda kv: int(kv.key) % 4},
                                  batch_rows=50,
                                  retry=float(os.environ.get("SAMZA_DSL_PG_RETRY", "30"))))
events.filter(lambda kv: kv.value["id"] % 10 != 9, name="keep").send_to(rows)
