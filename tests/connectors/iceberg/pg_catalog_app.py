"""The job of ``test_catalog_refused.py``: events ``KV(str(n), {"id": n})`` on the local system,
one partition, appended to Iceberg table ``lake.events`` of a SQL catalog whose SQLAlchemy URI
``SAMZA_DSL_ICEBERG_URI`` holds (a PostgreSQL database), its files in ``SAMZA_DSL_ICEBERG_WH``."""

from __future__ import annotations

import os

from samza_dsl import StreamApplication
from samza_dsl.iceberg import IcebergSystem
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

app = StreamApplication("ice-pg")
local = LocalSystem("local")
events = app.input(local.input("events", serde=KVSerde(StringSerde(), JsonSerde()),
                               partitions=1))
lake = IcebergSystem("lake", catalog_uri=os.environ["SAMZA_DSL_ICEBERG_URI"],
                     warehouse=os.environ["SAMZA_DSL_ICEBERG_WH"])
events.send_to(app.output(lake.table_output("event-rows", table="lake.events",
                                            schema={"id": "long"}, columns={"id": "id"})))
