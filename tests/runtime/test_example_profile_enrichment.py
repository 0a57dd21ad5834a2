"""The bootstrap/priority example (examples/profile_enrichment.py): every click is enriched, since
each task reads the profiles to their end first, and corrections go ahead of clicks; on the test
runner and on the local system, across a restart too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from example_apps import docstring_failures, load_example

from operators.hashing import partition_for
from runtime import LocalRunner
from runtime.local.system import LocalJob
from samza_dsl import KV
from samza_dsl.testing import TestRunner

example = load_example("profile_enrichment")
INPUTS = example.sample_input(400, seed=1)
CORRECTED = {c.key for c in INPUTS["profile-corrections"]}


def by_key(msgs: list[Any]) -> dict[int, list[Any]]:
    """Messages in their key's partition, as a producer writes them."""
    n = example.PARTITIONS
    return {p: [m for m in msgs if partition_for(m.key.encode(), n) == p] for p in range(n)}


def enriched(inputs: dict[str, list[Any]], **kw: Any) -> list[Any]:
    runner = TestRunner(example.build_app(**kw))
    for sid, msgs in inputs.items():
        runner.add_input(sid, by_key(msgs))
    return list(runner.run().messages("enriched-clicks"))


def check(out: list[Any], clicks: list[Any]) -> None:
    assert sorted((m.key, m.value["ts"]) for m in out) == sorted(
        (c.key, c.value["ts"]) for c in clicks)
    for m in out:
        assert m.value["name"] == f"User {m.key.split('-')[1]}"
        assert (m.value["country"] == "SE") == (m.key in CORRECTED)


def test_the_examples_docstring() -> None:
    assert docstring_failures(example) == 0


def test_every_click_is_enriched_in_memory_and_not_without_bootstrap() -> None:
    check(enriched(INPUTS), INPUTS["clicks"])
    # the control: without bootstrap, clicks come before the profiles they need
    plain = enriched(INPUTS, bootstrap=False)
    assert sum(m.value["country"] is None for m in plain) > 0


def test_every_click_is_enriched_on_the_local_system_after_a_restart(tmp_path: Path) -> None:
    config = {"job.dir": str(tmp_path)}
    inputs = {sid: by_key(msgs) for sid, msgs in INPUTS.items()}
    first = LocalRunner(example.app, config, inputs=inputs).run()
    try:
        check(list(first.messages("enriched-clicks")), INPUTS["clicks"])
    finally:
        first.close()
    # user-1 moves to Japan; the job is down meanwhile and more clicks come
    moved = [KV("user-1", {"name": "User 1", "country": "JP"})]
    clicks = [KV(f"user-{u % 4}", {"page": "/feed", "ts": 1_800_000_000 + u}) for u in range(40)]
    job = LocalJob(example.app, config, run=False)
    try:
        job.load("clicks", clicks)  # a KV goes to its key's partition
        job.load("profiles", moved)
    finally:
        job.close()
    second = LocalRunner(example.app, config).run()
    try:
        out = list(second.messages("enriched-clicks"))
    finally:
        second.close()
    assert len(out) == 40
    assert {m.value["country"] for m in out if m.key == "user-1"} == {"JP"}
    assert {m.value["country"] for m in out if m.key == "user-0"} == {"SE"}
