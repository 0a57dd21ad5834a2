"""Counts per key in an event-time window, on the embedded system, for the tests of what the end
of a bounded run does to open panes. SAMZA_ENDED_WINDOW picks the window: tumbling (10 s),
hopping (10 s every 5 s) or session (5 s gap)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

S = timedelta(seconds=1)


def app() -> StreamApplication:
    kind = os.environ.get("SAMZA_ENDED_WINDOW", "tumbling")
    built = StreamApplication("ended")
    local = LocalSystem("local")
    events = local.input("events", serde=JsonSerde(), partitions=1)
    out = local.output("counts", serde=KVSerde(StringSerde(), JsonSerde()))
    key = lambda e: e["k"]  # noqa: E731
    when = lambda e: e["t"]  # noqa: E731
    common: dict[str, Any] = {"init": int, "fold": lambda e, n: n + 1, "event_time": when}
    if kind == "session":
        window = Windows.keyed_session(key, 5 * S, **common)
    elif kind == "hopping":
        window = Windows.keyed_hopping(key, 10 * S, 5 * S, **common)
    else:
        window = Windows.keyed_tumbling(key, 10 * S, **common)
    (built.input(events).window(window, name="w")
        .map(lambda p: KV(f"{p.key.key}@{p.key.pane_id}", p.message), name="row")
        .send_to(built.output(out)))
    return built
