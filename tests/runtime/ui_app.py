"""The job the job-page tests watch: clicks per page in 2-second windows of event time, with a
step that takes about 0.2 ms a message, so input loaded in bursts shows as lag for a while.

``clicks`` (4 partitions): ``KV(user, {"page", "ts", "bot"})``. The job drops bots, looks the
page's section up (the slow step), repartitions by page and counts per page in 2-second tumbling
windows; a click whose window has closed is dropped as late."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from samza_dsl import KV, StreamApplication, WindowPane, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

PAGES = ["/home", "/jobs", "/feed", "/messaging", "/profile"]


def _serde() -> KVSerde:
    return KVSerde(StringSerde(), JsonSerde())


def human(click: KV[str, dict[str, Any]]) -> bool:
    return not click.value.get("bot", False)


def with_section(click: KV[str, dict[str, Any]]) -> dict[str, Any]:
    deadline = time.perf_counter() + 0.0002  # a lookup that takes a while
    while time.perf_counter() < deadline:
        pass
    return {**click.value, "section": click.value["page"].split("/")[1] or "home"}


def page(click: dict[str, Any]) -> str:
    return str(click["page"])


def event_time(message: KV[str, dict[str, Any]]) -> float:
    return float(message.value["ts"])


def count_one(_message: Any, count: int) -> int:
    return count + 1


def record(pane: WindowPane) -> KV[str, dict[str, Any]]:
    return KV(pane.key.key, {"page": pane.key.key, "start_ms": int(pane.key.pane_id),
                             "clicks": pane.message})


system = LocalSystem("local")
app = StreamApplication("clicks", config={"job.default.system": "local"})
clicks = app.input(system.input("clicks", serde=_serde(), partitions=4))
out = app.output(system.output("clicks-per-page", serde=_serde(), partitions=4))
(
    clicks.filter(human, name="humans")
    .map(with_section, name="section")
    .partition_by(page, lambda c: c, serde=_serde(), name="by-page")
    .window(Windows.keyed_tumbling(lambda m: m.key, timedelta(seconds=2), init=lambda: 0,
                                   fold=count_one, event_time=event_time), name="per-page")
    .map(record, name="record")
    .send_to(out)
)


def sample_input(n: int, start: float = 1_700_000_000.0, step: float = 0.01,
                 late_every: int = 50) -> list[KV[str, dict[str, Any]]]:
    """``n`` clicks ``step`` seconds apart from ``start``; one in ``late_every`` is a minute
    late, one in 20 from a bot."""
    out = []
    for i in range(n):
        ts = start + i * step - (60.0 if late_every and i % late_every == late_every - 1 else 0)
        out.append(KV(f"user-{i % 37}", {"page": PAGES[i % len(PAGES)], "ts": ts,
                                          "bot": i % 20 == 7}))
    return out
