"""Page views enriched with user profiles that live in a remote service (a remote table).

Each view ``KV(user, {"page": ...})`` is joined with its user's profile, read over HTTP from a
key-value service (``samza_dsl.testing.kv_service``), through a cache, under a rate limit and
with retries; profile updates are written back to the service with ``send_to``. The views run on
the embedded local system.

    python examples/remote_profiles.py 2000   # starts a profile service on 127.0.0.1, runs the job

With a service of your own: ``PROFILES_URL=http://host:port samza-dsl run
examples/remote_profiles.py:app --sample 2000``.

>>> inputs = sample_input(4, users=3)
>>> inputs["page-views"][0], len(inputs["profile-updates"])
(KV(key='u1', value={'page': '/p/1'}), 1)
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
from typing import Any

from samza_dsl import KV, CacheSpec, RetryPolicy, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem
from samza_dsl.testing.kv_service import HttpKV, KVService

__all__ = ["app", "build_app", "enrich", "sample_input", "sample_profiles", "main"]

SERDE = KVSerde(StringSerde(), JsonSerde())


def enrich(view: KV[str, dict[str, Any]], profile: KV[str, Any] | None) -> KV[str, Any]:
    """The view with its user's tier ("unknown" for a user the service does not know)."""
    tier = profile.value["tier"] if profile is not None else "unknown"
    return KV(view.key, {**view.value, "tier": tier})


def build_app(url: str) -> StreamApplication:
    """The job, reading profiles from the key-value service at ``url``."""
    service = HttpKV(url)
    app = StreamApplication("remote-profiles", config={
        "task.max.concurrency": 32, "task.callback.timeout.ms": 30_000, "task.commit.ms": 1000})
    local = LocalSystem("local")
    views = app.input(local.input("page-views", serde=SERDE, partitions=2))
    updates = app.input(local.input("profile-updates", serde=SERDE, partitions=2))
    enriched = app.output(local.output("enriched-views", serde=SERDE, partitions=2))
    profiles = app.remote_table(
        "profiles", read=service.read, write=service.write, rate_limit=5_000,
        retry=RetryPolicy(max_attempts=4, backoff=0.05), cache=CacheSpec(ttl=30, size=10_000))
    views.join_table(profiles, combine=enrich, name="with-profile").send_to(enriched)
    updates.send_to(profiles)  # KV(user, profile) puts it; KV(user, None) deletes it
    return app


app = build_app(os.environ.get("PROFILES_URL", "http://127.0.0.1:8765"))


def sample_profiles(users: int = 100) -> dict[str, Any]:
    """The service's profiles: users u1..u{users}, every fifth one unknown to it."""
    tiers = ["gold", "silver", "bronze"]
    return {f"u{i}": {"tier": tiers[i % 3]} for i in range(1, users + 1) if i % 5}


def sample_input(n: int, users: int = 100, seed: int = 1) -> dict[str, list[KV[str, Any]]]:
    """``n`` page views of ``users`` users, and one profile update per 50 views (for new users
    ``n{i}``, whom no view reads)."""
    rnd = random.Random(seed)
    views = [KV(f"u{i % users + 1}", {"page": f"/p/{rnd.randint(1, 50)}"}) for i in range(n)]
    updates = [KV(f"n{i}", {"tier": "new"}) for i in range(max(1, n // 50))]
    return {"page-views": views, "profile-updates": updates}


def main(n: int = 2000) -> dict[str, int]:
    """Start a profile service on 127.0.0.1, run the job over ``n`` sample views, and print
    the views per tier. Returns them."""
    from runtime import LocalRunner

    with KVService(sample_profiles()) as service, tempfile.TemporaryDirectory() as job_dir:
        job = build_app(service.url)
        runner = LocalRunner(job, {"job.dir": job_dir}, inputs=sample_input(n)).run()
        tiers: dict[str, int] = {}
        for kv in runner.messages("enriched-views"):
            tiers[kv.value["tier"]] = tiers.get(kv.value["tier"], 0) + 1
        reads = sum(1 for _, method, _ in service.log if method == "GET")
        written = sum(1 for k in service.data if k.startswith("n"))
    print(f"{n} views enriched: {dict(sorted(tiers.items()))}; the service answered {reads} "
          f"reads (the cache answered the rest) and holds {written} new profiles")
    return tiers


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
