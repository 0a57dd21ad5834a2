"""The job of the PostgreSQL failure tests: events ``KV(str(n), {"id": n, "name": "x"})`` on
the local system, one partition, either written into table ``SAMZA_DSL_PG_TABLE`` (default
``events``; columns ``id`` and ``name``, batches of 50 rows) or, with ``SAMZA_DSL_PG_READ=1``,
joined with table ``people`` by key (``remote_table``), on the database whose connection
string ``SAMZA_DSL_PG_CONNINFO`` holds."""

from __future__ import annotations

import os

from samza_dsl import StreamApplication
from samza_dsl.postgres import PostgresSystem
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

SERDE = KVSerde(StringSerde(), JsonSerde())

app = StreamApplication("pg-fail")
local = LocalSystem("local")
events = app.input(local.input("events", serde=SERDE, partitions=1))
pg = PostgresSystem("pg", conninfo=os.environ["SAMZA_DSL_PG_CONNINFO"])
if os.environ.get("SAMZA_DSL_PG_READ") == "1":
    people = pg.remote_table(app, "people", table="people", key="id")
    (events.join_table(people, combine=lambda kv, p: {"id": kv.value["id"], "p": p and p.value})
     .send_to(app.output(local.output("joined", serde=JsonSerde(), partitions=1))))
else:
    events.send_to(app.output(pg.output_table(
        "event-rows", table=os.environ.get("SAMZA_DSL_PG_TABLE", "events"),
        columns={"id": "id", "name": "name"}, batch_rows=50)))
