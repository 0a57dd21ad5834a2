"""A static job under exactly-once whose EndTxn goes unanswered (``TaskProducer.commit``).

The broker is real; what is lost is one message on the way: either the EndTxn itself (the
broker never sees it, so the transaction stays open) or the broker's answer to it (the broker
committed). aiokafka's ``commit_transaction`` is wrapped in this process to lose it; the broker
then does what it does. The task's producer, after ``END_S`` without an answer, starts a new
producer of its transactional id, which settles the transaction, and reads the transaction's
marker from the log: a commit goes on, an abort is sent again. Either way each input's count
appears exactly once among the committed outputs, as a run without the loss gives.

Before, the task waited for the answer until the producer's timeout (30 s), and the job failed
with ``TransactionUnanswered``: seen once on tansu, under a full suite's load.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from collections import Counter, defaultdict
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from kafka_apps import count_app
from kafka_helpers import create_topic, produce_each, run
from test_kafka_exactly_once import committed_records

from operators.hashing import partition_for
from runtime import LocalRunner
from runtime.kafka import exactly_once

USERS = 12


def _load(bootstrap: str, tag: str, n: int) -> Counter[str]:
    run(create_topic(bootstrap, f"gwevents-{tag}", 4))
    run(create_topic(bootstrap, f"gwout-{tag}", 2))
    records, per_user = [], Counter[str]()
    for i in range(n):
        user = f"u{i % USERS}"
        per_user[user] += 1
        key = user.encode()
        records.append((partition_for(key, 4), key,
                        json.dumps({"user": user, "ts": i}).encode()))
    run(produce_each(bootstrap, f"gwevents-{tag}", records))
    return per_user


def _losing(monkeypatch: pytest.MonkeyPatch, lose: dict[int, str]) -> list[str]:
    """aiokafka's EndTxn of commit number ``n`` (over the process, from 1) lost as
    ``lose[n]`` says: "request" (never sent) or "answer" (sent, its answer never awaited)."""
    original = AIOKafkaProducer.commit_transaction
    calls: list[int] = [0]
    lost: list[str] = []

    async def commit_transaction(self: AIOKafkaProducer) -> None:
        calls[0] += 1
        how = lose.get(calls[0])
        if how is None:
            return await original(self)
        lost.append(how)
        if how == "answer":
            sent = asyncio.ensure_future(original(self))
            sent.add_done_callback(lambda f: f.cancelled() or f.exception())
        await asyncio.Event().wait()  # no answer, ever

    monkeypatch.setattr(AIOKafkaProducer, "commit_transaction", commit_transaction)
    monkeypatch.setattr(exactly_once, "END_S", 0.5)
    return lost


def _assert_each_count_once(bootstrap: str, tag: str, per_user: Counter[str]) -> None:
    """Each user's running counts 1..n, each once, among the committed outputs."""
    counts: dict[str, list[int]] = defaultdict(list)
    for key, value in committed_records(bootstrap, f"gwout-{tag}", 2):
        assert key is not None and value is not None
        counts[key.decode()].append(json.loads(value))
    got: dict[str, Any] = {u: sorted(ns) for u, ns in counts.items()}
    assert got == {u: list(range(1, n + 1)) for u, n in per_user.items()}


@pytest.mark.parametrize("lose", [{3: "request"}, {3: "answer"},
                                  {2: "answer", 5: "request", 6: "request"}],
                         ids=["request", "answer", "both"])
def test_an_unanswered_end_txn_is_settled_and_every_count_written_once(
        kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, lose: dict[int, str]) -> None:
    tag = uuid.uuid4().hex[:8]
    per_user = _load(kafka_bootstrap, tag, 600)
    lost = _losing(monkeypatch, lose)
    app = count_app(kafka_bootstrap, tag)
    with tempfile.TemporaryDirectory() as tmp:
        LocalRunner(app, {"job.dir": tmp, "task.commit.ms": 50,
                          "job.processing.guarantee": "exactly-once"}).run().close()
    assert sorted(lost) == sorted(lose.values())  # each loss happened

    _assert_each_count_once(kafka_bootstrap, tag, per_user)


def test_an_aborted_transaction_too_big_to_send_again_stops_the_job_and_a_rerun_goes_on(
        kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond ``KEEP_BYTES`` the task keeps nothing to send again: an abort after an unanswered
    EndTxn stops the job with one clear error, nothing of that transaction visible, and the
    next run goes on from the task's checkpoint: still each count once."""
    tag = uuid.uuid4().hex[:8]
    per_user = _load(kafka_bootstrap, tag, 600)
    lost = _losing(monkeypatch, {3: "request"})
    monkeypatch.setattr(exactly_once, "KEEP_BYTES", 0)
    app = count_app(kafka_bootstrap, tag)
    config = {"task.commit.ms": 50, "job.processing.guarantee": "exactly-once"}
    with tempfile.TemporaryDirectory() as tmp:
        with pytest.raises(Exception, match=r"was aborted after its EndTxn got no answer.*"
                                            r"too much to send again.*run the job again"):
            LocalRunner(app, {"job.dir": tmp, **config}).run()
        assert lost == ["request"]
        LocalRunner(count_app(kafka_bootstrap, tag), {"job.dir": tmp, **config}).run().close()

    _assert_each_count_once(kafka_bootstrap, tag, per_user)
