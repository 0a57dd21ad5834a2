"""A keyed tumbling window over an input of the local system, for the crash test of the window's
in-memory pane values (``test_crash_windows.py``): page views ``KV(user, {"page", "ts"})`` in 4
partitions, counted per user in 1-second windows of event time; each closed pane goes to
``counts`` as ``KV("user|start_ms", count)``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from samza_dsl import KV, StreamApplication, WindowPane, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

__all__ = ["app", "WINDOW_MS"]

WINDOW_MS = 1000


def view_time(view: dict[str, Any]) -> float:
    return float(view["ts"])


def event_time(message: KV[str, dict[str, Any]]) -> float:
    return float(message.value["ts"])


def user(message: KV[str, Any]) -> str:
    return message.key


def zero() -> int:
    return 0


def count_one(_message: Any, count: int) -> int:
    return count + 1


def record(pane: WindowPane) -> KV[str, int]:
    return KV(f"{pane.key.key}|{pane.key.pane_id}", pane.message)


app = StreamApplication("window-crash", config={"task.commit.ms": 1000})
local = LocalSystem("local")
serde = KVSerde(StringSerde(), JsonSerde())
views = app.input(local.input("views", serde=serde, partitions=4,
                              event_time=lambda kv: kv.value["ts"]))
counts = app.output(local.output("counts", serde=serde, partitions=4))
(views.window(Windows.keyed_tumbling(user, timedelta(milliseconds=WINDOW_MS), init=zero,
                                     fold=count_one, event_time=event_time), name="per-user")
    .map(record, name="record")
    .send_to(counts))
