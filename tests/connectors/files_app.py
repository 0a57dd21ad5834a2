"""The files outputs' crash-test job: events ``KV(id, {"id": n, "pad": ...})`` on the local
system, each written as a row to a Parquet output and a JSON Lines output in the folder
``SAMZA_DSL_FILES_OUT`` names, in small files (several per commit)."""

from __future__ import annotations

import os

from samza_dsl import StreamApplication
from samza_dsl.files import FileSystem
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

app = StreamApplication("files-crash")
local = LocalSystem("local")
events = app.input(local.input("events", serde=KVSerde(StringSerde(), JsonSerde()),
                               partitions=4))
files = FileSystem("files", path=os.environ.get("SAMZA_DSL_FILES_OUT", "files-out"))
rows = app.output(files.parquet("rows", schema={"key": "string", "id": "int64", "pad": "string"},
                                max_bytes=6000, row_group_rows=40, max_seconds=0.05))
lines = app.output(files.jsonl("lines", max_bytes=9000))
events.send_to(rows)
events.map(lambda kv: kv.value, name="values").send_to(lines)
