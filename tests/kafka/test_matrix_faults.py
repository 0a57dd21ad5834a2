"""One answer in every combination, with faults: jobs run by their consumer group
(``job.coordinator=kafka``: ``samza-dsl run --follow`` processes, each with its own job.dir) of
1, 2 and 3 members, at least once and exactly once, while input flows and members are killed
(SIGKILL at a seeded point of the feed), frozen past the session timeout (SIGSTOP, then SIGCONT),
added and removed. Each run's committed outputs (as a read_committed reader reads them, by the
log's markers) are judged against the plain model of the job, by the rules of docs/semantics.md
("One answer in every combination"):

- exactly once: the model's outputs, each once, whatever the faults;
- at least once without a fault: the model's outputs, each once;
- at least once with faults: every output the model gives is there and may be there more than
  once, each copy with the model's value: replays through the ``partition_by`` are applied once
  (docs/semantics.md, "Replays applied once"), so a running count never goes past its model's
  last value and a window's pane never holds more than its model's count.

The shapes: ``window`` (``partition_by`` user, then a 10 s tumbling event-time window counting
each user's events) and ``count`` (``partition_by`` user, then each user's running count in a
table with a changelog). Their inputs are in event-time order, and a last message on every input
partition carries an event time past all others, so that every pane the model has closes.

The bug that the first tests pinned: under exactly-once each task writes through a producer of its
own, made when the task comes to the member, before the member learns its run's generation. Its
control records (the watermarks it sends down the intermediate stream) carried the generation it
was made with, the tasks downstream skipped them as an earlier run's records, and the window never
closed a pane: zero outputs, silently.

``SAMZA_DSL_MATRIX_SEEDS=N`` runs each faulty combination with N seeds instead of one (the long
mode, docs/testing.md).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from group_helpers import SESSION_MS, Member, kill_left, settled, stop_all, wait_for
from kafka_helpers import create_topic, keyed, produce_each, run
from test_kafka_exactly_once import committed_records

from operators.hashing import partition_for

GUARANTEES = {"alo": "at-least-once", "eos": "exactly-once"}
USERS = 24
EVENTS = 1200
#: event time far past every event: one per input partition closes every pane before it
FLUSH_TS = 1_000_000.0
SEEDS = int(os.environ.get("SAMZA_DSL_MATRIX_SEEDS", "1"))
Event = tuple[str, dict[str, Any]]


def events() -> list[Event]:
    """``EVENTS`` events in event-time order, a quarter second apart, over ``USERS`` users."""
    return [(f"u{i % USERS}", {"user": f"u{i % USERS}", "ts": 1000.0 + i * 0.25})
            for i in range(EVENTS)]


def flush_events() -> list[Event]:
    """One event past every other's time on each of the 4 input partitions."""
    keys: dict[int, str] = {}
    i = 0
    while len(keys) < 4:
        keys.setdefault(partition_for(f"flush{i}".encode(), 4), f"flush{i}")
        i += 1
    return [(k, {"user": k, "ts": FLUSH_TS}) for k in keys.values()]


# -- the shapes: their models and how a run's outputs are read ------------------------------------

def window_model(evs: list[Event]) -> Counter[tuple[str, str, int]]:
    """The panes of a 10 s tumbling window per user: (user, pane id, count), each once (the
    flush events' panes never close)."""
    panes: Counter[tuple[str, str]] = Counter()
    for user, v in evs:
        if v["ts"] < FLUSH_TS:
            panes[(user, str(int(v["ts"] // 10) * 10_000))] += 1
    return Counter((u, start, n) for (u, start), n in panes.items())


def count_model(evs: list[Event]) -> Counter[tuple[str, str, int]]:
    """Each user's running counts: (user, "", n) for n in 1..their events."""
    per = Counter(user for user, _ in evs)
    return Counter((u, "", n) for u, total in per.items() for n in range(1, total + 1))


def outputs(bootstrap: str, tag: str) -> Counter[tuple[str, str, int]]:
    """The committed outputs, as the models write them."""
    out: Counter[tuple[str, str, int]] = Counter()
    for k, v in committed_records(bootstrap, f"gwout-{tag}", 2):
        if k is None or v is None:
            continue
        d = json.loads(v)
        out[(k.decode(), d["start"], d["n"]) if isinstance(d, dict) else (k.decode(), "", d)] \
            += 1
    return out


MODELS: dict[str, Callable[[list[Event]], Counter[tuple[str, str, int]]]] = {
    "window": window_model, "count": count_model}


def complete(got: Counter[tuple[str, str, int]], model: Counter[tuple[str, str, int]],
             exact: bool) -> bool:
    """Whether the outputs are all there: the model's (at least once with faults, maybe some
    more than once)."""
    return set(got) >= set(model)


def judge(got: Counter[tuple[str, str, int]], model: Counter[tuple[str, str, int]],
          shape: str, exact: bool, what: str) -> None:
    """The rules of docs/semantics.md, "One answer in every combination"."""
    if exact:
        twice = {o: n for o, n in got.items() if n > 1}
        assert not twice, f"{what}: outputs committed more than once: {list(twice.items())[:5]}"
        assert got == model, (f"{what}: missing {sorted(model - got)[:6]}, "
                              f"extra {sorted(got - model)[:6]}")
        return
    # at least once with faults: repeats allowed, each with the model's value (a count never
    # past its model's last, a pane never larger than the model's)
    assert set(got) == set(model), (f"{what} ({shape}): missing "
                                    f"{sorted(set(model) - set(got))[:6]}, values the model "
                                    f"does not give {sorted(set(got) - set(model))[:6]}")


# -- the runs ----------------------------------------------------------------------------------------

def feed(bootstrap: str, topic: str, evs: list[Event]) -> None:
    records = keyed(evs, 4)
    for start in range(0, len(records), 60):
        run(produce_each(bootstrap, topic, records[start:start + 60]))
        time.sleep(0.15)


def scenario(tmp_path: Path, bootstrap: str, *, shape: str, guarantee: str, members: int,
             fault: str, seed: int = 0) -> None:
    tag = uuid.uuid4().hex[:8]
    topic = f"gwevents-{tag}"
    run(create_topic(bootstrap, topic, 4))
    evs = events()
    model = MODELS[shape](evs + flush_events())
    rng = random.Random(seed)
    args = ("-c", f"job.processing.guarantee={GUARANTEES[guarantee]}")
    ms = [Member(tmp_path / f"m{i}", bootstrap, tag, *args, app=shape) for i in range(members)]
    what = f"{shape}, {members} member(s), {guarantee}, {fault} (seed {seed})"
    try:
        wait_for("the group settled", lambda: settled(ms, 4), 60, ms)
        cut = int(len(evs) * rng.uniform(0.3, 0.7))  # where in the feed the fault comes
        feed(bootstrap, topic, evs[:cut])
        if fault == "kill":
            ms[0].kill()
            feed(bootstrap, topic, evs[cut:cut + 120])  # input flows while the group notices
            cut += 120
        elif fault == "freeze":
            ms[0].signal(signal.SIGSTOP)
            feed(bootstrap, topic, evs[cut:cut + 120])
            time.sleep(SESSION_MS / 1000 * 1.5)  # past the session timeout
            ms[0].signal(signal.SIGCONT)
            cut += 120
        elif fault == "churn":  # one more member, then one of the first ones leaves
            ms.append(Member(tmp_path / f"m{members}", bootstrap, tag, *args, app=shape))
            third = cut + (len(evs) - cut) // 2
            feed(bootstrap, topic, evs[cut:third])
            assert ms[0].stop() == 0, ms[0].text()[-3000:]
            cut = third
        feed(bootstrap, topic, evs[cut:])
        feed(bootstrap, topic, flush_events())
        exact = guarantee == "eos" or fault in ("none", "churn")
        live = [m for m in ms if m.alive()]
        try:
            wait_for("every output of the model committed",
                     lambda: complete(outputs(bootstrap, tag), model, exact), 120, live)
        except AssertionError as exc:
            got = outputs(bootstrap, tag)
            raise AssertionError(f"{what}: {exc}\n{len(got)} of {len(model)} outputs; "
                                 f"missing {sorted(model - got)[:8]}") from None
        time.sleep(1.0)  # a duplicate would come with a later commit
        judge(outputs(bootstrap, tag), model, shape, exact, what)
        stop_all(live)
    finally:
        kill_left(ms)


@pytest.mark.parametrize("members", [1, 2, 3])
@pytest.mark.parametrize("guarantee", ["eos", "alo"])
def test_window_after_partition_by_in_the_group(kafka_bootstrap: str, tmp_path: Path,
                                                guarantee: str, members: int) -> None:
    scenario(tmp_path, kafka_bootstrap, shape="window", guarantee=guarantee, members=members,
             fault="none")


@pytest.mark.parametrize("fault", ["kill", "freeze"])
@pytest.mark.parametrize("shape", ["window", "count"])
@pytest.mark.parametrize("guarantee", ["eos", "alo"])
def test_a_lost_member(kafka_bootstrap: str, tmp_path: Path, guarantee: str, shape: str,
                       fault: str) -> None:
    for seed in range(SEEDS):
        scenario(tmp_path / str(seed), kafka_bootstrap, shape=shape, guarantee=guarantee,
                 members=2, fault=fault, seed=seed)


@pytest.mark.parametrize("guarantee", ["eos", "alo"])
def test_members_come_and_go_while_input_flows(kafka_bootstrap: str, tmp_path: Path,
                                               guarantee: str) -> None:
    for seed in range(SEEDS):
        scenario(tmp_path / str(seed), kafka_bootstrap, shape="count", guarantee=guarantee,
                 members=2, fault="churn", seed=seed)
