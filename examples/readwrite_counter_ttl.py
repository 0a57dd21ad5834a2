"""W1's ReadWrite counter with a time to live on its table (the soak's ``--ttl`` mode,
benchmarks/soak.py): a count not written for ``READWRITE_TTL_SECONDS`` (an hour by default) is
forgotten, on processing time, and its key is deleted from the LMDB store and the changelog at
a following commit.

    READWRITE_TTL_SECONDS=60 samza-dsl run examples/readwrite_counter_ttl.py:app --follow
"""

from __future__ import annotations

import os
from datetime import timedelta

try:
    from examples.readwrite_counter import CountInTable
except ImportError:  # run by its path (samza-dsl run examples/...): its directory is on the path
    from readwrite_counter import CountInTable  # type: ignore[no-redef]
from samza_dsl import StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

__all__ = ["app", "TTL"]

TTL = timedelta(seconds=float(os.environ.get("READWRITE_TTL_SECONDS", "3600")))

app = StreamApplication("readwrite-counter-ttl", config={"task.commit.ms": 1000})
local = LocalSystem("local")
events = app.input(local.input("events", serde=KVSerde(StringSerde(), JsonSerde()), partitions=4))
counts = app.output(local.output("counts", serde=KVSerde(StringSerde(), JsonSerde()),
                                 partitions=4))
app.table("counts", serde=KVSerde(StringSerde(), JsonSerde()), ttl=TTL)
events.map(CountInTable(), name="count").send_to(counts)
