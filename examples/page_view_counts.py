"""Page view counts per page and country, in 10-second windows of event time.

Two inputs, both keyed by user id:

- ``page-views`` (4 partitions): ``KV(user, {"page", "bot", "ts"})``, one per page view;
- ``logins`` (2 partitions): ``KV(user, {"country", "ts"})``, one per login, with the country the
  user logged in from.

The job

1. drops views by bots (``filter``);
2. repartitions the logins by user (``partition_by``). A stream-stream join needs both sides
   co-partitioned, and ``logins`` has 2 partitions where ``page-views`` has 4: the planner gives
   the intermediate stream ``page-view-counts-1-partition_by-logins-by-user`` 4 partitions because
   it meets ``page-views`` at the join;
3. joins each view with its user's latest login (``join`` with a 30-minute TTL), which gives the
   view a country. As in Samza, each side keeps its latest message per user, and a message joins
   when the other side's entry is younger than the TTL: a view with no login in the last 30
   minutes is not counted, and a login joins the user's latest view if that view is recent;
4. repartitions the located views by ``page|country`` (``partition_by``);
5. counts them per ``page|country`` in 10-second tumbling windows (``Windows.keyed_tumbling`` with
   init/fold). The window runs on the views' event time (``ts``, seconds), so replaying the same
   input gives the same panes;
6. sends ``KV("page|country", {"page", "country", "window_start_ms", "views"})`` to
   ``page-view-counts``.

Look at the plan with ``samza-dsl plan examples/page_view_counts.py:app``.
``sample_input(n)`` makes deterministic input for tests and demos:

>>> inputs = sample_input(4)
>>> sorted(inputs)
['logins', 'page-views']
>>> inputs["page-views"][0]
KV(key='user-17', value={'page': '/feed', 'bot': False, 'ts': 1700000000.252})
>>> inputs["logins"][0]
KV(key='user-17', value={'country': 'NL', 'ts': 1700000000.071})
>>> sample_input(100, seed=3) == sample_input(100, seed=3)
True
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

from samza_dsl import KV, StreamApplication, WindowPane, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

__all__ = ["app", "build_app", "sample_input", "WINDOW", "LOGIN_TTL"]

WINDOW = timedelta(seconds=10)
LOGIN_TTL = timedelta(minutes=30)


def _json_kv() -> KVSerde:
    return KVSerde(StringSerde(), JsonSerde())


# -- user functions ------------------------------------------------------------------------------

def is_human(view: KV[str, dict[str, Any]]) -> bool:
    return not view.value.get("bot", False)


def user_of(message: KV[str, Any]) -> str:
    return str(message.key)


def login_value(login: KV[str, dict[str, Any]]) -> dict[str, Any]:
    return login.value


def locate(view: KV[str, dict[str, Any]], login: KV[str, dict[str, Any]]) -> dict[str, Any]:
    """A view with the country of its user's latest login."""
    return {"user": view.key, "page": view.value["page"], "country": login.value["country"],
            "ts": view.value["ts"]}


def page_country(view: dict[str, Any]) -> str:
    return f"{view['page']}|{view['country']}"


def view_time(view: dict[str, Any]) -> dict[str, Any]:
    return {"ts": view["ts"]}


def event_time(message: KV[str, dict[str, Any]]) -> float:
    return float(message.value["ts"])


def message_key(message: KV[Any, Any]) -> Any:
    return message.key


def zero() -> int:
    return 0


def count_one(_message: Any, count: int) -> int:
    return count + 1


def count_record(pane: WindowPane) -> KV[str, dict[str, Any]]:
    page, _, country = str(pane.key.key).rpartition("|")
    return KV(pane.key.key, {"page": page, "country": country,
                             "window_start_ms": int(pane.key.pane_id), "views": pane.message})


# -- the application -----------------------------------------------------------------------------

def build_app(system: Any = None, *, name: str = "page-view-counts",
              topics: dict[str, str] | None = None) -> StreamApplication:
    """The job on ``system`` (by default the embedded ``LocalSystem``; a ``KafkaSystem`` runs it
    on Kafka). ``topics`` maps stream ids to physical names."""
    system = system if system is not None else LocalSystem("local")
    topics = topics or {}
    app = StreamApplication(name, config={"job.default.system": system.name})

    def stream(sid: str, **kw: Any) -> dict[str, Any]:
        return {"serde": _json_kv(), "physical_name": topics.get(sid), **kw}

    # both inputs declare their event time, so each stream's progress is known where the join
    # meets them and needs no tracing through it
    page_views = app.input(system.input("page-views", event_time=event_time,
                                        **stream("page-views", partitions=4)))
    logins = app.input(system.input("logins", event_time=event_time,
                                    **stream("logins", partitions=2)))
    counts = app.output(system.output("page-view-counts", **stream("page-view-counts",
                                                                   partitions=4)))

    logins_by_user = logins.partition_by(user_of, login_value, serde=_json_kv(),
                                         name="logins-by-user")

    located = page_views.filter(is_human, name="humans").join(
        logins_by_user, key=user_of, other_key=user_of, combine=locate, ttl=LOGIN_TTL,
        name="view-login")

    (
        located.partition_by(page_country, view_time, serde=_json_kv(), name="by-page-country")
        .window(Windows.keyed_tumbling(message_key, WINDOW, init=zero, fold=count_one,
                                       event_time=event_time), name="views-per-window")
        .map(count_record, name="count-record")
        .send_to(counts)
    )
    return app


app = build_app()


# -- sample input --------------------------------------------------------------------------------

START_MS = 1_700_000_000_000  # a fixed epoch, so sample panes are the same on every run
PAGES = ["/home", "/jobs", "/feed", "/messaging", "/notifications", "/profile"]
PAGE_WEIGHTS = [8, 6, 10, 3, 2, 4]
COUNTRIES = ["US", "IN", "BR", "DE", "NL", "JP"]
USERS = 30


def sample_input(n: int, seed: int = 0) -> dict[str, list[KV[str, dict[str, Any]]]]:
    """``n`` page views and the logins before them, as ``{"page-views": [...], "logins": [...]}``.

    A user logs in (from their home country, now and then from another) before their first view
    and again with a small chance before a later one; about one view in twenty comes from a bot.
    Event times (``ts``, in seconds) rise by 20 to 400 ms per event, in each list and across both.
    The same ``n`` and ``seed`` give the same lists."""
    if n < 0:
        raise ValueError(f"sample_input needs n >= 0, got {n}")
    rng = random.Random(seed)
    home = [rng.choice(COUNTRIES) for _ in range(USERS)]
    logged_in = [False] * USERS
    now_ms = START_MS
    views: list[KV[str, dict[str, Any]]] = []
    logins: list[KV[str, dict[str, Any]]] = []
    for _ in range(n):
        u = rng.randrange(USERS)
        user = f"user-{u}"
        if not logged_in[u] or rng.random() < 0.05:
            now_ms += rng.randint(20, 400)
            country = home[u] if rng.random() < 0.9 else rng.choice(COUNTRIES)
            logins.append(KV(user, {"country": country, "ts": now_ms / 1000.0}))
            logged_in[u] = True
        now_ms += rng.randint(20, 400)
        page = rng.choices(PAGES, weights=PAGE_WEIGHTS)[0]
        views.append(KV(user, {"page": page, "bot": rng.random() < 0.05, "ts": now_ms / 1000.0}))
    return {"page-views": views, "logins": logins}


if __name__ == "__main__":
    print(app.plan().explain())
