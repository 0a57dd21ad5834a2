"""Page views per country in one-minute windows of event time: a job to reprocess on Spark.

One input, ``page-views`` (4 partitions, unkeyed JSON): ``{"user", "page", "country", "bot",
"ts"}``, one per page view, ``ts`` in seconds since the epoch. The job

1. drops views by bots (``filter``);
2. repartitions the views by country (``partition_by``), so each country is counted in one task;
3. counts them per country in one-minute tumbling windows of event time
   (``Windows.keyed_tumbling`` with init/fold on ``ts``);
4. sends ``KV(country, {"country", "window_start_ms", "views"})`` to ``country-counts``.

The input declares its event time, so a reprocessing run orders each partition by ``ts`` and a
window's count is the same however the input files are split.

Streaming, on the embedded local log::

    samza-dsl run examples/reprocess_page_views.py:app --sample 1000

Batch, over files, on Spark::

    samza-dsl reprocess examples/reprocess_page_views.py:app \\
        --input page-views=views.jsonl --output country-counts=counts.jsonl

``sample_input(n)`` makes deterministic views, and ``write_jsonl(path, n)`` writes them as JSON
Lines:

>>> views = sample_input(3)
>>> views[0]
{'user': 'user-82', 'page': '/feed', 'country': 'BR', 'bot': False, 'ts': 1700000040.02}
>>> sample_input(50, seed=2) == sample_input(50, seed=2)
True
"""

from __future__ import annotations

import math
import os
import random
from datetime import timedelta
from typing import Any

from samza_dsl import KV, StreamApplication, WindowPane, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

__all__ = ["app", "build_app", "sample_input", "write_jsonl", "WINDOW", "COUNTRIES"]

WINDOW = timedelta(minutes=1)


def _json_kv() -> KVSerde:
    return KVSerde(StringSerde(), JsonSerde())


# -- user functions ------------------------------------------------------------------------------

def view_time(view: dict[str, Any]) -> float:
    return float(view["ts"])


def is_human(view: dict[str, Any]) -> bool:
    return not view.get("bot", False)


def country_of(view: dict[str, Any]) -> str:
    return str(view["country"])


def slim(view: dict[str, Any]) -> dict[str, Any]:
    return {"page": view["page"], "ts": view["ts"]}


def message_key(message: KV[str, Any]) -> str:
    return str(message.key)


def event_time(message: KV[str, dict[str, Any]]) -> float:
    return float(message.value["ts"])


def zero() -> int:
    return 0


def count_one(_message: Any, count: int) -> int:
    return count + 1


def count_record(pane: WindowPane) -> KV[str, dict[str, Any]]:
    country = str(pane.key.key)
    return KV(country, {"country": country, "window_start_ms": int(pane.key.pane_id),
                        "views": pane.message})


# -- the application -----------------------------------------------------------------------------

def build_app(system: Any = None, *, name: str = "country-views") -> StreamApplication:
    """The job on ``system`` (by default the embedded ``LocalSystem``)."""
    system = system if system is not None else LocalSystem("local")
    app = StreamApplication(name, config={"job.default.system": system.name})
    views = app.input(system.input("page-views", serde=JsonSerde(), partitions=4,
                                   event_time=view_time))
    counts = app.output(system.output("country-counts", serde=_json_kv(), partitions=4))
    (
        views.filter(is_human, name="humans")
        .partition_by(country_of, slim, serde=_json_kv(), name="by-country")
        .window(Windows.keyed_tumbling(message_key, WINDOW, init=zero, fold=count_one,
                                       event_time=event_time), name="views-per-minute")
        .map(count_record, name="count-record")
        .send_to(counts)
    )
    return app


app = build_app()


# -- sample input --------------------------------------------------------------------------------

START_S = 1_700_000_040  # a fixed epoch on a minute boundary: the same windows on every run
PAGES = ["/home", "/jobs", "/feed", "/messaging", "/notifications", "/profile"]
COUNTRIES = ["US", "IN", "BR", "DE", "NL", "JP"]
COUNTRY_WEIGHTS = [10, 8, 4, 3, 1, 2]
PEAK_PERIOD_S = 40 * 60  # each country's share of the traffic rises and falls over 40 minutes
USERS = 500


def sample_input(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` page views with event times (``ts``, seconds) that rise by 0 to 40 ms each; about one
    in twenty is by a bot. Each user has a home country, and each country's share of the views
    swings by +-50% over ``PEAK_PERIOD_S``, at its own phase. The same ``n`` and ``seed`` give
    the same list."""
    if n < 0:
        raise ValueError(f"sample_input needs n >= 0, got {n}")
    rng = random.Random(seed)
    users: dict[str, list[str]] = {c: [] for c in COUNTRIES}
    for u in range(USERS):
        home = COUNTRIES[u] if u < len(COUNTRIES) else rng.choices(COUNTRIES, COUNTRY_WEIGHTS)[0]
        users[home].append(f"user-{u}")
    phases = [2 * math.pi * i / len(COUNTRIES) for i in range(len(COUNTRIES))]
    now_ms = START_S * 1000
    out: list[dict[str, Any]] = []
    for _ in range(n):
        now_ms += rng.randint(0, 40)
        angle = 2 * math.pi * (now_ms / 1000.0 - START_S) / PEAK_PERIOD_S
        weights = [w * (1 + 0.5 * math.sin(angle + ph))
                   for w, ph in zip(COUNTRY_WEIGHTS, phases, strict=True)]
        country = rng.choices(COUNTRIES, weights)[0]
        out.append({"user": rng.choice(users[country]), "page": rng.choice(PAGES),
                    "country": country, "bot": rng.random() < 0.05, "ts": now_ms / 1000.0})
    return out


def write_jsonl(path: str | os.PathLike[str], n: int, seed: int = 0) -> int:
    """Write ``sample_input(n, seed)`` to ``path`` as JSON Lines; returns the number of lines."""
    import msgspec

    encoder = msgspec.json.Encoder()
    views = sample_input(n, seed)
    with open(path, "wb") as f:
        for view in views:
            f.write(encoder.encode(view) + b"\n")
    return len(views)


if __name__ == "__main__":
    print(app.plan().explain())
