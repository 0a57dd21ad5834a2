"""Trending tags: the job of Figure 3 in *Samza: Stateful Scalable Stream Processing at LinkedIn*
(Noghabi et al., VLDB 2017), written with samza-dsl.

Members' profile updates arrive on ``profile-updates`` (4 partitions), keyed by member id. The job

1. splits them into skill updates and job updates (a ``filter`` and a ``map`` each); other updates,
   such as a new photo, are dropped;
2. extracts tags from each kind (``flat_map``): ``skill:<skill>`` for every skill added,
   ``title:<title>`` and ``company:<company>`` for a new job;
3. merges the two tag streams (``merge``);
4. repartitions by tag (``partition_by``), so that one task sees every occurrence of a tag;
5. counts each tag in 10-second tumbling windows (``Windows.keyed_tumbling`` with init/fold);
6. repartitions the counts by window (``partition_by`` the pane id), so that one task sees every
   tag counted in a window;
7. keeps the top ``TOP_K`` tags of each window (a second keyed tumbling window whose fold keeps the
   k largest counts);
8. sends each window's top-k list to ``trending-tags``, keyed by the window start in milliseconds.

The two ``partition_by`` operators split the job into three stages joined by the intermediate
streams ``trending-tags-1-partition_by-by-tag`` and ``trending-tags-1-partition_by-by-window``.

Both windows run on event time, so replaying the same input gives the same panes: the counting
window reads each update's ``ts`` (seconds); the top-k window gives a tag count the end of the
window it was counted in, the earliest time at which that count can exist, so it is never late.

Look at the plan with ``samza-dsl plan examples/trending_tags.py:app`` (``--format svg -o
plan.svg`` draws it). ``sample_input(n)`` makes deterministic input for tests and demos:

>>> updates = sample_input(5)
>>> [u.value["type"] for u in updates]
['job', 'skill', 'skill', 'photo', 'job']
>>> updates[1]
KV(key='member-32', value={'type': 'skill', 'skills': ['Machine Learning', 'Kafka'], 'ts': 1700000000.664})
>>> sample_input(50, seed=7) == sample_input(50, seed=7)
True
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from samza_dsl import KV, StreamApplication, WindowPane, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

__all__ = ["app", "sample_input", "TOP_K", "WINDOW", "INPUT_PARTITIONS"]

TOP_K = 5
WINDOW = timedelta(seconds=10)
WINDOW_MS = int(WINDOW.total_seconds() * 1000)
INPUT_PARTITIONS = 4


def _json_kv() -> KVSerde:
    return KVSerde(StringSerde(), JsonSerde())


# -- user functions: plain module-level functions, so they pickle and can be tested alone --------

def is_skill_update(update: KV[str, dict[str, Any]]) -> bool:
    return update.value.get("type") == "skill"


def is_job_update(update: KV[str, dict[str, Any]]) -> bool:
    return update.value.get("type") == "job"


def to_skill_update(update: KV[str, dict[str, Any]]) -> dict[str, Any]:
    return {"member": update.key, "skills": list(update.value["skills"]), "ts": update.value["ts"]}


def to_job_update(update: KV[str, dict[str, Any]]) -> dict[str, Any]:
    v = update.value
    return {"member": update.key, "title": v["title"], "company": v["company"], "ts": v["ts"]}


def _normalize(text: str) -> str:
    return " ".join(text.lower().split())


def skill_tags(skill_update: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for skill in skill_update["skills"]:
        yield {"tag": f"skill:{_normalize(skill)}", "member": skill_update["member"],
               "ts": skill_update["ts"]}


def job_tags(job_update: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for kind in ("title", "company"):
        yield {"tag": f"{kind}:{_normalize(job_update[kind])}", "member": job_update["member"],
               "ts": job_update["ts"]}


def tag_of(tag: dict[str, Any]) -> str:
    return str(tag["tag"])


def tag_occurrence(tag: dict[str, Any]) -> dict[str, Any]:
    return {"member": tag["member"], "ts": tag["ts"]}


def event_time(message: KV[str, dict[str, Any]]) -> float:
    return float(message.value["ts"])


def message_key(message: KV[Any, Any]) -> Any:
    return message.key


def message_value(message: KV[Any, Any]) -> Any:
    return message.value


def zero() -> int:
    return 0


def count_one(_message: Any, count: int) -> int:
    return count + 1


def count_by_window(pane: WindowPane) -> KV[str, list[Any]]:
    """A tag's count, keyed by the window (pane id: its start in ms) it was counted in."""
    return KV(pane.key.pane_id, [pane.key.key, pane.message])


def window_end(message: KV[str, list[Any]]) -> float:
    """Event time of a tag count: the end of its window, in seconds."""
    return (int(message.key) + WINDOW_MS) / 1000.0


def keep_top_k(message: KV[str, list[Any]], top: list[list[Any]]) -> list[list[Any]]:
    """The ``TOP_K`` largest ``[tag, count]`` pairs, by count then tag. A tag counted again (a
    re-fired pane) replaces its earlier count."""
    tag, count = message.value
    entries = [[t, c] for t, c in top if t != tag]
    entries.append([tag, count])
    entries.sort(key=lambda e: (-e[1], e[0]))
    return entries[:TOP_K]


def top_k_list(pane: WindowPane) -> KV[str, dict[str, Any]]:
    window_start = pane.key.key  # the counting window's pane id
    return KV(window_start, {"window_start_ms": int(window_start), "top": pane.message})


# -- the application -----------------------------------------------------------------------------

app = StreamApplication("trending-tags", config={"job.default.system": "local"})
local = LocalSystem("local")

updates = app.input(local.input("profile-updates", serde=_json_kv(), partitions=INPUT_PARTITIONS))
trending = app.output(local.output("trending-tags", serde=_json_kv(), partitions=1))

skills = (updates.filter(is_skill_update, name="skill-updates")
          .map(to_skill_update, name="to-skill-update"))
jobs = (updates.filter(is_job_update, name="job-updates")
        .map(to_job_update, name="to-job-update"))

tags = skills.flat_map(skill_tags, name="skill-tags").merge(
    jobs.flat_map(job_tags, name="job-tags"), name="all-tags")

tag_counts = (
    tags.partition_by(tag_of, tag_occurrence, serde=_json_kv(), name="by-tag")
    .window(Windows.keyed_tumbling(message_key, WINDOW, init=zero, fold=count_one,
                                   event_time=event_time), name="tag-counts")
)

(
    tag_counts.map(count_by_window, name="count-by-window")
    .partition_by(message_key, message_value, serde=_json_kv(), name="by-window")
    .window(Windows.keyed_tumbling(message_key, WINDOW, init=list, fold=keep_top_k,
                                   event_time=window_end), name="top-k")
    .map(top_k_list, name="top-k-list")
    .send_to(trending)
)


# -- sample input --------------------------------------------------------------------------------

START_MS = 1_700_000_000_000  # a fixed epoch, so sample panes are the same on every run
SKILLS = ["Python", "Kafka", "Stream Processing", "SQL", "Java", "Spark", "Kubernetes", "Go",
          "Machine Learning", "Rust"]
SKILL_WEIGHTS = [10, 8, 7, 6, 5, 4, 3, 2, 2, 1]  # skewed, so some tags trend
TITLES = ["Data Engineer", "Software Engineer", "Site Reliability Engineer", "Data Scientist",
          "Engineering Manager"]
COMPANIES = ["LinkedIn", "Acme", "Initech", "Globex"]
MEMBERS = 50


def sample_input(n: int, seed: int = 0) -> list[KV[str, dict[str, Any]]]:
    """``n`` profile updates for ``profile-updates``: ``KV(member id, update)`` where an update is
    ``{"type": "skill", "skills": [...], "ts": s}``, ``{"type": "job", "title": t, "company": c,
    "ts": s}`` or ``{"type": "photo", "ts": s}``. Event times (``ts``, in seconds) rise by 50 to
    500 ms per update. The same ``n`` and ``seed`` give the same list."""
    if n < 0:
        raise ValueError(f"sample_input needs n >= 0, got {n}")
    rng = random.Random(seed)
    now_ms = START_MS
    out: list[KV[str, dict[str, Any]]] = []
    for _ in range(n):
        now_ms += rng.randint(50, 500)
        member = f"member-{rng.randrange(MEMBERS)}"
        kind = rng.choices(("skill", "job", "photo"), weights=(6, 3, 1))[0]
        update: dict[str, Any] = {"type": kind}
        if kind == "skill":
            picked = rng.choices(SKILLS, weights=SKILL_WEIGHTS, k=rng.randint(1, 3))
            update["skills"] = list(dict.fromkeys(picked))
        elif kind == "job":
            update["title"] = rng.choice(TITLES)
            update["company"] = rng.choice(COMPANIES)
        update["ts"] = now_ms / 1000.0
        out.append(KV(member, update))
    return out


if __name__ == "__main__":
    print(app.plan().explain())
