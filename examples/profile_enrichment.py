"""Profile enrichment: clicks joined with the latest profile of their user, where every task reads
the profiles to their end before it looks at a single click (a bootstrap input), and profile
corrections go ahead of clicks (a priority input).

Three inputs, all keyed by user id and with 2 partitions:

- ``profiles`` (``bootstrap=True``): ``KV(user, {"name", "country"})``, the profile changelog.
  On every start, restarts included, each task reads its partition of it to its end as of the
  start, and completes those messages, before it hands out any other message;
- ``profile-corrections`` (``priority=1``): ``KV(user, {"country"})``, fixes from support staff.
  When a task has both corrections and clicks at hand, the corrections go first;
- ``clicks``: ``KV(user, {"page", "ts"})``.

The job keeps the profiles in a table (``send_to(table)``; a correction updates the user's
country), joins each click with its user's profile (``join_table``) and sends
``KV(user, {"page", "ts", "name", "country"})`` to ``enriched-clicks``. Because ``profiles`` is
a bootstrap input, no click meets a table that is still being filled at start: a click of a
user whose profile was written before the job started is always enriched.

Look at the plan with ``samza-dsl plan examples/profile_enrichment.py:app`` (the inputs show
``bootstrap`` and ``priority 1``). ``sample_input(n)`` makes deterministic input:

>>> inputs = sample_input(3)
>>> inputs["profiles"][0]
KV(key='user-0', value={'name': 'User 0', 'country': 'NL'})
>>> inputs["clicks"][0]
KV(key='user-12', value={'page': '/profile', 'ts': 1700000000.5})
>>> with_profile(KV("u", {"country": "DE"}), KV("u", {"name": "U", "country": "NL"}))
KV(key='u', value={'name': 'U', 'country': 'DE'})
"""

from __future__ import annotations

import random
from typing import Any

from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

__all__ = ["app", "build_app", "sample_input", "USERS", "PARTITIONS"]

USERS = 20
PARTITIONS = 2
PAGES = ["/feed", "/jobs", "/messages", "/profile"]
COUNTRIES = ["NL", "DE", "FR", "US"]


def _json_kv() -> KVSerde:
    return KVSerde(StringSerde(), JsonSerde())


# -- user functions ------------------------------------------------------------------------------

def with_profile(correction: KV[str, dict[str, Any]],
                 profile: KV[str, dict[str, Any]] | None) -> KV[str, dict[str, Any]] | None:
    """The user's profile with the corrected country (None, dropped, for an unknown user)."""
    if profile is None:
        return None
    return KV(correction.key, {**profile.value, "country": correction.value["country"]})


def enrich(click: KV[str, dict[str, Any]],
           profile: KV[str, dict[str, Any]] | None) -> KV[str, dict[str, Any]]:
    """A click with its user's name and country (None for both when the profile is unknown)."""
    p = profile.value if profile is not None else {}
    return KV(click.key, {**click.value, "name": p.get("name"), "country": p.get("country")})


# -- the application -----------------------------------------------------------------------------

def build_app(*, bootstrap: bool = True) -> StreamApplication:
    """The application; ``bootstrap=False`` makes ``profiles`` an ordinary input, to compare."""
    app = StreamApplication("profile-enrichment", config={"job.default.system": "local"})
    local = LocalSystem("local")
    table = app.table("profiles", serde=_json_kv())
    profiles = app.input(local.input("profiles", serde=_json_kv(), partitions=PARTITIONS,
                                     bootstrap=bootstrap))
    corrections = app.input(local.input("profile-corrections", serde=_json_kv(),
                                        partitions=PARTITIONS, priority=1))
    clicks = app.input(local.input("clicks", serde=_json_kv(), partitions=PARTITIONS))
    profiles.send_to(table)
    corrections.join_table(table, combine=with_profile, name="correct").send_to(table)
    (clicks.join_table(table, combine=enrich, name="enrich")
     .send_to(app.output(local.output("enriched-clicks", serde=_json_kv(),
                                      partitions=PARTITIONS))))
    return app


app = build_app()


# -- sample input --------------------------------------------------------------------------------

def sample_input(n: int, seed: int = 0) -> dict[str, list[KV[str, dict[str, Any]]]]:
    """A profile for each of ``USERS`` users, ``n`` clicks (0.5 s apart) and a correction for
    every fifth user. The same ``n`` and ``seed`` give the same input."""
    if n < 0:
        raise ValueError(f"sample_input needs n >= 0, got {n}")
    rng = random.Random(seed)
    profiles = [KV(f"user-{u}", {"name": f"User {u}", "country": COUNTRIES[u % len(COUNTRIES)]})
                for u in range(USERS)]
    clicks = [KV(f"user-{rng.randrange(USERS)}",
                 {"page": rng.choice(PAGES), "ts": 1_700_000_000 + (i + 1) / 2})
              for i in range(n)]
    corrections = [KV(f"user-{u}", {"country": "SE"}) for u in range(0, USERS, 5)]
    return {"profiles": profiles, "profile-corrections": corrections, "clicks": clicks}


if __name__ == "__main__":
    print(app.plan().explain())
