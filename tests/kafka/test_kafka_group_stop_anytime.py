"""A group member stopped at any moment of a takeover exits 0 and commits what it should.

Two members of an exactly-once job count a stream that flows all along; one is SIGKILLed, and
the survivor is sent SIGTERM at a drawn moment after: before the group notices, while it
rebalances, while the survivor restores the dead member's tasks, or once it runs them. Its
progress display is on, redrawn every 50 ms: the printer asks the consumer about every
partition its tasks read, those of tasks being added too (a survivor once died of aiokafka's
"Partition is not assigned" there, exit 1 with a traceback). Each round starts two new members;
a last member counts what is left, and every event is counted once, each key's counts 1..n.

``SAMZA_DSL_STOP_EXAMPLES=N`` runs N rounds instead of CI's 3, with the seed of the draws
printed (``SAMZA_DSL_STOP_SEED`` draws them again).
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from group_helpers import SESSION_MS, Member, kill_left, settled, wait_for
from kafka_helpers import create_topic, keyed, produce_each, run
from test_kafka_exactly_once_group import (
    EOS,
    KEYS,
    _all_counted,
    _check_exactly_once,
    _committed_outputs,
)

LONG = int(os.environ.get("SAMZA_DSL_STOP_EXAMPLES", "0"))
ROUNDS = LONG or 3
SEED = int(os.environ.get("SAMZA_DSL_STOP_SEED", "0")) or random.SystemRandom().randrange(1 << 30)
#: the survivor hears of the death within the session timeout; its takeover follows
LATEST_S = SESSION_MS / 1000 + 4.0

pytestmark = [pytest.mark.timeout(0)] if LONG else []


def _clean_stop(member: Member, what: str) -> None:
    code = member.stop()
    out = member.text()
    assert code == 0 and "Traceback" not in out, f"{what}: exit {code}:\n{out[-4000:]}"


def test_a_survivor_stopped_at_any_moment_of_a_takeover_exits_0_and_loses_nothing(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    draws = random.Random(SEED)
    sys.stderr.write(f"\n[SAMZA_DSL_STOP_SEED={SEED}]\n")
    tag = uuid.uuid4().hex[:8]
    topic = f"gevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, 4))
    stop_feed = threading.Event()
    fed = [0]
    feeder = threading.Thread(target=_feed, args=(kafka_bootstrap, topic, fed, stop_feed))
    members: list[Member] = []

    def member(name: str) -> Member:
        m = Member(tmp_path / name, kafka_bootstrap, tag, *EOS, "-c", "task.progress.ms=50",
                   quiet=False)
        members.append(m)
        return m

    try:
        for r in range(ROUNDS):
            pair = [member(f"round-{r}-a"), member(f"round-{r}-b")]
            wait_for(f"round {r}: two members split the tasks", lambda p=pair: settled(p, 4)
                     and all(len(m.assignment()[1]) == 2 for m in p),  # type: ignore[index]
                     60, pair)
            if r == 0:
                feeder.start()
            wait_for(f"round {r}: the job has committed outputs",
                     lambda: _committed_outputs(kafka_bootstrap, tag), 60, pair)
            dead, survivor = pair
            dead.kill()
            killed = time.monotonic()
            delay = draws.uniform(0.0, LATEST_S)
            wait_for(f"round {r}: {delay:.2f} s after the kill", lambda d=delay, k=killed:
                     time.monotonic() - k >= d, LATEST_S + 5, [survivor])
            _clean_stop(survivor, f"round {r}: the survivor stopped {delay:.2f} s after the kill")
        stop_feed.set()
        feeder.join(30)
        n = fed[0]
        last = member("last")
        wait_for("the last member counts every event",
                 lambda: _all_counted(kafka_bootstrap, tag, n), 120, [last])
        _clean_stop(last, "the last member")
    finally:
        stop_feed.set()
        if feeder.ident is not None:
            feeder.join(120)
        kill_left(members)
    _check_exactly_once(kafka_bootstrap, tag, n)


def _feed(bootstrap: str, topic: str, fed: list[int], stop: threading.Event) -> None:
    """Events over ``KEYS`` keys, 20 every 0.25 s until ``stop``; ``fed[0]``: how many."""
    i = 0
    while not stop.is_set():
        run(produce_each(bootstrap, topic, keyed(((f"k{j % KEYS}", {"i": j})
                                                  for j in range(i, i + 20)), 4)))
        i += 20
        fed[0] = i
        time.sleep(0.25)
