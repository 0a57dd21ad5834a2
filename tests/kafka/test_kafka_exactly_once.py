"""Exactly once on Kafka (``job.processing.guarantee=exactly-once``, ``runtime.kafka.exactly_once``)
on the tansu broker, for real: the proof job of ``eos_kafka_app.py`` runs as a subprocess.

- A running job's outputs are invisible to a ``read_committed`` consumer until its commit, then
  all visible; at least once, they are visible before any commit.
- SIGKILL between the sends of a commit and its EndTxn (``commit.sent``) leaves that
  transaction open: ``read_committed`` reads nothing of it; the restart aborts it and writes
  each output once.
- The proof: 30 kills at every step of a commit, after batches and at random times, more input
  before each run; then every input appears exactly once among the committed records, and each
  key's running counts (through the intermediate stream and the table's changelog) run 1, 2,
  ... n. The same kills at least once leave duplicates, which shows the check can fail.

What tansu (0.6.0) does differently, and how the tests live with it:
- its Fetch responses list no aborted transactions, so its own ``read_committed`` hands out an
  aborted transaction's records once the transaction has ended;
- it holds a partition's last stable offset at the first offset of a transaction that ended
  until every transaction that overlaps it on some partition has ended too, which after kills
  can be never.
The job's consumers resolve transactions from the log's markers themselves
(``runtime.kafka.resolved``), as Apache Kafka's ``read_committed`` reads them. The tests read
the committed records the same way, from the log's batches and markers (``committed``); raw
``read_committed`` reads are used only while a transaction is open.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka_helpers import create_topic, produce_each, run
from txn_helpers import log_batches, read_isolated

from operators.hashing import partition_for
from runtime.engine.faults import KAFKA_TXN_POINTS, POINTS
from tests.proc_helpers import finish

ROOT = Path(__file__).resolve().parents[2]
APP = f"{Path(__file__).resolve().parent / 'eos_kafka_app.py'}:app"
PARTITIONS = 4
KEYS = 20
SEED = int(os.environ.get("SAMZA_DSL_EOS_SEED", "20260413"))


class Proof:
    """One proof job on the broker: its topics, what was loaded, and its runs."""

    def __init__(self, bootstrap: str, tmp: Path, guarantee: str) -> None:
        self.bootstrap = bootstrap
        self.tag = uuid.uuid4().hex[:8]
        self.dir = tmp / f"job-{self.tag}"
        self.guarantee = guarantee
        self.events = f"eos-events-{self.tag}"
        self.ends = [0] * PARTITIONS
        #: each input's (partition, offset) and key
        self.expected: dict[tuple[int, int], str] = {}
        run(create_topic(bootstrap, self.events, PARTITIONS))

    def load(self, n: int, rng: random.Random) -> None:
        """``n`` inputs, each carrying its own partition and offset, one record a batch."""
        records = []
        for _ in range(n):
            key = f"k{rng.randrange(KEYS)}"
            p = partition_for(key.encode(), PARTITIONS)
            o = self.ends[p]
            self.ends[p] += 1
            self.expected[(p, o)] = key
            records.append((p, key.encode(), json.dumps({"p": p, "o": o}).encode()))
        run(produce_each(self.bootstrap, self.events, records))

    def start(self, crash_at: str | None = None, *extra: str) -> subprocess.Popen[str]:
        env = {**os.environ, "TEST_KAFKA": self.bootstrap, "TEST_TAG": self.tag,
               "PYTHONFAULTHANDLER": "1"}
        env.pop("SAMZA_DSL_CRASH_AT", None)
        if crash_at:
            env["SAMZA_DSL_CRASH_AT"] = crash_at
        # a run that waits names what it waits for, well within the test's wait for its end
        cmd = [sys.executable, "-m", "runtime.ops.cli", "run", APP, "-c", f"job.dir={self.dir}",
               "-c", f"job.processing.guarantee={self.guarantee}", "-q", "--show", "0",
               "-c", "job.bounded.stall.ms=60000", *extra]
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def run(self, crash_at: str | None = None, kill_after: float | None = None,
            *extra: str) -> tuple[int, str]:
        proc = self.start(crash_at, *extra)
        return finish(proc, kill_after, 180)

    def topic(self, stream: str) -> str:
        return f"eos-{stream}-{self.tag}"


def committed_records(bootstrap: str, topic: str, partitions: int = PARTITIONS
                      ) -> list[tuple[bytes | None, bytes | None]]:
    """What a read_committed consumer of Apache Kafka reads of ``topic``, as (key, value):
    records outside transactions, and those of transactions that ended with a COMMIT marker
    (not those of aborted or still open ones), partition by partition in log order."""
    out: list[tuple[bytes | None, bytes | None]] = []
    for p in range(partitions):
        open_: dict[int, list[tuple[bytes | None, bytes | None]]] = collections.defaultdict(list)
        for b in run(log_batches(bootstrap, topic, p)):
            rows = list(zip(b.keys, b.values, strict=True))
            if not b.transactional:
                out.extend(rows)
            elif b.marker is None:
                open_[b.producer_id].extend(rows)
            else:
                records = open_.pop(b.producer_id, [])
                if b.marker == "COMMIT":
                    out.extend(records)
    return out


def committed(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> list[bytes | None]:
    """The values of ``committed_records``."""
    return [v for _, v in committed_records(bootstrap, topic, partitions)]


def committed_counts(bootstrap: str, topic: str) -> dict[str, list[int]]:
    """Per key, the running counts a read_committed consumer of Apache Kafka reads of the
    ``counts`` output, in log order."""
    out: dict[str, list[int]] = collections.defaultdict(list)
    for k, v in committed_records(bootstrap, topic):
        if k is not None and v is not None:
            out[k.decode()].append(json.loads(v))
    return out


def transactions(bootstrap: str, topic: str, partitions: int = PARTITIONS
                 ) -> collections.Counter[str]:
    """How the transactions of ``topic`` ended: COMMIT, ABORT, or open."""
    ends: collections.Counter[str] = collections.Counter()
    for p in range(partitions):
        pending: set[int] = set()
        for b in run(log_batches(bootstrap, topic, p)):
            if b.transactional and b.marker is None:
                pending.add(b.producer_id)
            elif b.marker is not None and b.producer_id in pending:
                pending.discard(b.producer_id)
                ends[b.marker] += 1
        ends["open"] += len(pending)
    return ends


def seen_of(values: list[bytes | None]) -> collections.Counter[tuple[int, int]]:
    return collections.Counter(tuple(json.loads(v or b"null")) for v in values)


def read_committed_now(bootstrap: str, topic: str) -> int:
    """How many records a read_committed consumer reads of ``topic`` now (raw, as the broker
    hands them out)."""
    return sum(len(run(read_isolated(bootstrap, topic, p, "read_committed", deadline=5)))
               for p in range(PARTITIONS))


def read_uncommitted_now(bootstrap: str, topic: str) -> int:
    """How many records the log of ``topic`` holds now, committed or not (read batch by batch:
    tansu's high watermark after multi-record batches is their base offset + 1)."""
    return sum(len(b.values) for p in range(PARTITIONS)
               for b in run(log_batches(bootstrap, topic, p)) if b.marker is None)


def _wait_for(what: Any, timeout: float) -> None:
    until = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < until, "timed out"
        time.sleep(0.2)


def _visibility(bootstrap: str, tmp: Path, guarantee: str) -> tuple[int, int]:
    """Run the job (``--follow``, no commit before it is stopped); once it wrote outputs, what
    read_committed and read_uncommitted consumers read of ``seen``. Then stop it (SIGINT: it
    drains and commits) and check every output is there once."""
    proof = Proof(bootstrap, tmp, guarantee)
    proof.load(300, random.Random(SEED))
    proc = proof.start(None, "--follow", "-c", "job.coordinator=static",
                       "-c", "task.commit.ms=600000")
    wanted = 300 if guarantee == "at-least-once" else 1
    try:
        _wait_for(lambda: read_uncommitted_now(bootstrap, proof.topic("seen")) >= wanted, 60)
        time.sleep(1.0)
        during = read_committed_now(bootstrap, proof.topic("seen"))
        written = read_uncommitted_now(bootstrap, proof.topic("seen"))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 130), err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert seen_of(committed(bootstrap, proof.topic("seen"))) == collections.Counter(
        proof.expected.keys()), "after the commit every output, once"
    assert read_committed_now(bootstrap, proof.topic("seen")) == 300
    return during, written


def test_outputs_are_invisible_to_read_committed_until_the_commit(kafka_bootstrap: str,
                                                                  tmp_path: Path) -> None:
    during, written = _visibility(kafka_bootstrap, tmp_path, "exactly-once")
    assert written >= 1 and during == 0, (during, written)


def test_at_least_once_outputs_are_visible_before_any_commit(kafka_bootstrap: str,
                                                             tmp_path: Path) -> None:
    during, written = _visibility(kafka_bootstrap, tmp_path, "at-least-once")
    assert during == 300, (during, written)


def test_a_kill_between_sends_and_end_txn_leaves_nothing_visible(kafka_bootstrap: str,
                                                                   tmp_path: Path) -> None:
    bs = kafka_bootstrap
    proof = Proof(bs, tmp_path, "exactly-once")
    proof.load(400, random.Random(SEED + 1))
    code, err = proof.run("commit.sent:3", None, "-c", "user.eos.sleep.ms=15")
    assert code == -signal.SIGKILL, err
    seen = proof.topic("seen")
    checkpoints = f"__samza_checkpoint_eos-proof-{proof.tag}-1"
    assert transactions(bs, checkpoints, 1)["open"] >= 1, "the kill left its transaction open"
    before = seen_of(committed(bs, seen))
    assert read_committed_now(bs, seen) == sum(before.values()), \
        "read_committed reads the committed transactions' records, none of the open one"
    code, err = proof.run()
    assert code == 0, err
    ends = transactions(bs, checkpoints, 1)
    assert ends["open"] == 0 and ends["ABORT"] >= 1, ends
    after = seen_of(committed(bs, seen))
    assert after == collections.Counter(proof.expected.keys()), "each output once, none lost"


#: kills of the exactly-once proof, and the seconds they must fit in (a run takes about 2 s)
KILLS = 30
KILL_BUDGET_S = 150.0
#: seconds of kill rounds at least once (it needs only some duplicates)
BUDGET_S = 60.0
AT_LEAST_ONCE_BUDGET_S = BUDGET_S


def _kill_rounds(proof: Proof, points: tuple[str, ...], rng: random.Random,
                 budget_s: float = BUDGET_S, kills: int = KILLS) -> list[str]:
    """Kill the job ``KILLS`` times or for ``budget_s`` seconds, whichever ends first: at every
    point of ``points`` in turn (the n-th time it is reached, n seeded: mid-batch or at a step of
    a commit), and at seeded random times; more input before each run, then a last run to the
    end."""
    where: list[str] = []
    rounds = 0
    began = time.monotonic()
    while len(where) < kills and time.monotonic() - began < budget_s:
        rounds += 1
        proof.load(300, rng)
        if rounds % 3 == 0:  # a run takes about 1.6 s, its first second starting up
            crash_at, after = None, rng.uniform(0.9, 1.6)
        else:  # a run reaches a commit point 10 to 40 times (the first ones before any
            # output), ``batch`` under 20 times
            point = points[len(where) % len(points)]
            n = rng.randint(1, 10) if point == "batch" else rng.randint(6, 26)
            crash_at, after = f"{point}:{n}", None
        code, err = proof.run(crash_at, after, "-c", "user.eos.sleep.ms=120")
        if code == -signal.SIGKILL:
            where.append(crash_at or f"after {after:.1f}s")
        else:
            assert code == 0, f"run {rounds} ({crash_at or after}) exited with {code}:\n{err}"
    assert len(where) >= min(kills, len(points) + 2), f"only {len(where)} kills: {where}"
    code, err = proof.run()
    assert code == 0, err
    return where


def test_exactly_once_on_kafka_holds_under_sigkill(kafka_bootstrap: str, kafka_broker_kind: str,
                                                   tmp_path: Path) -> None:
    proof = Proof(kafka_bootstrap, tmp_path, "exactly-once")
    kills = _kill_rounds(proof, KAFKA_TXN_POINTS, random.Random(SEED), KILL_BUDGET_S, KILLS)
    print(f"exactly once: {len(kills)} kills: {kills}")
    assert len(kills) >= KILLS, f"only {len(kills)} kills in {KILL_BUDGET_S:g} s: {kills}"
    seen = seen_of(committed(kafka_bootstrap, proof.topic("seen")))
    twice = sorted(p for p, n in seen.items() if n > 1)
    assert not twice, f"inputs emitted more than once: {twice[:10]} (kills: {kills})"
    gaps = sorted(set(proof.expected) - set(seen))
    assert not gaps, f"inputs never emitted: {gaps[:10]} (kills: {kills})"
    assert set(seen) == set(proof.expected)
    # each key's running counts, which pass through the intermediate stream and the table's
    # changelog: 1, 2, ... n, none repeated or skipped
    counts = committed_counts(kafka_bootstrap, proof.topic("counts"))
    truth = collections.Counter(proof.expected.values())
    wrong = {k: c for k, c in counts.items() if c != list(range(1, truth[k] + 1))}
    assert not wrong, f"running counts off: {dict(list(wrong.items())[:3])} (kills: {kills})"
    assert set(counts) == set(truth)
    if kafka_broker_kind == "apache-kafka":
        # the broker's own read_committed (its last stable offset and aborted-transaction list)
        # reads what the markers say, record for record; tansu's lists no aborted transactions
        # (module docstring), so only Apache Kafka's reader is asked
        for stream in ("seen", "counts"):
            topic = proof.topic(stream)
            by_markers = committed(kafka_bootstrap, topic)  # partition by partition
            by_broker = [v for p in range(PARTITIONS) for _, v in run(read_isolated(
                kafka_bootstrap, topic, p, "read_committed", deadline=30))]
            assert by_broker == by_markers, f"{stream}: read_committed differs from the markers"


def test_the_kafka_proof_finds_duplicates_at_least_once(kafka_bootstrap: str,
                                                         tmp_path: Path) -> None:
    proof = Proof(kafka_bootstrap, tmp_path, "at-least-once")
    # one kill that must leave duplicates whatever the timing: no commit but the last one, killed
    # once its outputs are flushed and before its checkpoint is written
    proof.load(300, random.Random(SEED - 1))
    code, err = proof.run("commit.outputs-flushed:1", None, "-c", "task.commit.ms=600000")
    assert code == -signal.SIGKILL, f"exited with {code}, not killed:\n{err}"
    kills = _kill_rounds(proof, POINTS, random.Random(SEED), AT_LEAST_ONCE_BUDGET_S)
    print(f"at least once: {len(kills)} kills: {kills}")
    seen = seen_of(committed(kafka_bootstrap, proof.topic("seen")))
    counts = committed_counts(kafka_bootstrap, proof.topic("counts"))
    repeated = {k: c for k, c in counts.items() if len(c) != len(set(c))}
    assert any(n > 1 for n in seen.values()) or repeated, kills
    assert set(seen) == set(proof.expected)  # but nothing is lost


@pytest.mark.parametrize("end", ["abort", "commit"])
def test_a_bounded_run_held_by_an_open_transaction_stops_and_names_it(
        kafka_bootstrap: str, tmp_path: Path, end: str) -> None:
    """Another producer's transaction left open at the end of an input holds a bounded
    exactly-once run (its records wait for their marker): past ``job.bounded.stall.ms`` the run
    stops with one line naming the topic, partition, offset and the marker it waits for, and
    commits nothing it has not processed. Once the transaction ends, a rerun reads past its
    marker (the input's last offset) and ends: every input once, the transaction's record once
    if it committed and never if it aborted."""
    from runtime.kafka.txn_producer import TransactionalProducer

    bs = kafka_bootstrap
    proof = Proof(bs, tmp_path, "exactly-once")
    proof.load(40, random.Random(SEED + 2))

    async def scenario() -> tuple[tuple[int, str], tuple[int, str]]:
        producer = TransactionalProducer(bs, f"outsider-{proof.tag}")
        await producer.start()
        try:
            await producer.begin()
            key = b"k-outsider"
            p = partition_for(key, PARTITIONS)
            await (await producer.send(proof.events, json.dumps({"p": p, "o": -1}).encode(),
                                       key=key, partition=p))
            held = await _run_async(proof, "-c", "job.bounded.stall.ms=3000")
            if end == "commit":
                await producer.commit()
                proof.expected[(p, -1)] = key.decode()
            else:
                await producer.abort()
            after = await _run_async(proof)
            return held, after
        finally:
            await producer.stop()

    (code, err), (code2, err2) = run(scenario())
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert "samza-dsl run: error: the run stopped: it made no progress for" in line, err
    assert f"topic {proof.events!r} partition " in line, line
    assert "wait for the COMMIT or ABORT marker of the open transaction of producer id" in line
    assert "job.bounded.stall.ms=3000" in line, line
    assert code2 == 0, err2
    assert seen_of(committed(bs, proof.topic("seen"))) == collections.Counter(
        proof.expected.keys()), f"each input once; the record of the transaction {end}ed: {end == 'commit'}"


async def _run_async(proof: Proof, *extra: str) -> tuple[int, str]:
    env = {**os.environ, "TEST_KAFKA": proof.bootstrap, "TEST_TAG": proof.tag}
    env.pop("SAMZA_DSL_CRASH_AT", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runtime.ops.cli", "run", APP, "-c", f"job.dir={proof.dir}",
        "-c", "job.processing.guarantee=exactly-once", "-q", "--show", "0", *extra, cwd=ROOT,
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(120):
            _, err = await proc.communicate()
    except TimeoutError:
        raise AssertionError(f"the run did not end in 120 s: {' '.join(extra)}") from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, err.decode()


def _dump(proof: Proof, *args: str) -> tuple[list[Any], str]:
    env = {**os.environ, "TEST_KAFKA": proof.bootstrap, "TEST_TAG": proof.tag}
    done = subprocess.run([sys.executable, "-m", "runtime.ops.cli", "dump", APP, "seen", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def test_dump_of_an_exactly_once_job_shows_what_a_downstream_reader_reads(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """``samza-dsl dump`` reads an exactly-once job's streams as a read_committed reader does,
    with no flag and no ``-c job.processing.guarantee``: neither the records of a transaction
    a kill left open nor those of the transaction the restart aborted; ``--uncommitted`` shows
    them, and says so."""
    bs = kafka_bootstrap
    proof = Proof(bs, tmp_path, "exactly-once")
    proof.load(400, random.Random(SEED + 3))
    seen = proof.topic("seen")
    # a run that commits at the end only, killed once it wrote outputs: its transaction open
    proc = proof.start(None, "--follow", "-c", "job.coordinator=static",
                       "-c", "task.commit.ms=600000")
    try:
        _wait_for(lambda: read_uncommitted_now(bs, seen) >= 1, 60)
    finally:
        proc.kill()
        proc.communicate()
    held = read_uncommitted_now(bs, seen)
    shown, note = _dump(proof)
    assert note == ""
    assert len(shown) == len(committed(bs, seen)) < held, (len(shown), held)
    everything, note = _dump(proof, "--uncommitted")
    assert len(everything) == held and "--uncommitted" in note and "open and aborted" in note
    code, err = proof.run()  # aborts the open transaction, then processes every input
    assert code == 0, err
    shown, _ = _dump(proof)
    assert collections.Counter(tuple(m["value"]) for m in shown) == collections.Counter(
        proof.expected.keys()), "each input once, though the log holds aborted records too"
    assert read_uncommitted_now(bs, seen) > len(shown)
