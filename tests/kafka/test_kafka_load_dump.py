"""``samza-dsl load`` and ``dump`` on a job whose streams are topics of the real (tansu) broker:
a load is checked whole before anything is sent; a load cut off part way says what each
partition acknowledged and how to load the rest; dump covers every stream of the job (dead
letters, intermediate streams, changelogs), reads only the tail for ``--limit``, a fetch at a
time, and refuses a topic that does not exist; the job's topics get the streams' retention."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from kafka_helpers import (
    APP_HEAD,
    BIN,
    CLI,
    consume_all,
    free_port,
    produce_each,
    run,
    topic_configs,
)
from outage_helpers import TcpProxy

from runtime.kafka.admin import describe_topics
from runtime.kafka.job_system import KafkaJobSystem
from runtime.kafka.load_dump import (
    PartialLoad,
    TopicReader,
    kafka_load,
    kafka_load_file,
    kafka_streams,
)
from runtime.kafka.system import offset_bounds
from runtime.ops.loader import load_app
from runtime.run_inputs import JsonLines
from samza_dsl.errors import SamzaError
from samza_dsl.kv import KV
from samza_dsl.testing.kafka_broker import TansuBroker

APP = APP_HEAD + '''app = StreamApplication("kio-" + TAG, config={"job.default.system": "kafka",
                                              "task.commit.ms": 100})
serde = KVSerde(StringSerde(), JsonSerde())
events = app.input(kafka.input("events", serde=serde,
                               partitions=int(os.environ.get("TEST_PARTITIONS", "3")),
                               physical_name="events-" + TAG))
counts = app.output(kafka.output("counts", serde=serde, partitions=2,
                                 physical_name="counts-" + TAG))
app.table("totals", serde=serde)


class Count:
    def init(self, ctx):
        self.table = ctx.table("totals")

    def __call__(self, kv):
        n = (self.table.get(kv.key) or 0) + 1
        self.table.put(kv.key, n)
        return KV(kv.key, n)


events.partition_by(lambda kv: kv.value["g"], lambda kv: kv.value, name="by-g") \\
    .map(Count(), name="count").send_to(counts)
'''


class Job:
    """The application above in ``tmp_path``, with a tag of its own, and the CLI on it."""

    def __init__(self, tmp_path: Path, bootstrap: str, partitions: int = 3) -> None:
        self.dir = tmp_path
        self.tag = uuid.uuid4().hex[:8]
        self.name = f"kio-{self.tag}-1"
        self.bootstrap = bootstrap
        (tmp_path / "app.py").write_text(APP)
        self.env = {**os.environ, "TEST_KAFKA": bootstrap, "TEST_TAG": self.tag,
                    "TEST_PARTITIONS": str(partitions), "PATH": f"{BIN}:{os.environ['PATH']}"}

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CLI, *args], cwd=self.dir, env=self.env, capture_output=True,
                              text=True, timeout=180)

    def ok(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = self.cli(*args)
        assert proc.returncode == 0, proc.stderr
        return proc

    def dump(self, stream: str, *args: str) -> list[object]:
        return [json.loads(line) for line in
                self.ok("dump", "app.py:app", stream, *args).stdout.splitlines()]

    def app(self, monkeypatch: pytest.MonkeyPatch) -> object:
        for k in ("TEST_KAFKA", "TEST_TAG", "TEST_PARTITIONS"):
            monkeypatch.setenv(k, self.env[k])
        return load_app(str(self.dir / "app.py") + ":app")


def _held(bootstrap: str, topic: str) -> dict[int, int]:
    """Records per partition (from the true end offsets)."""
    n = run(describe_topics(bootstrap, [topic]))[topic]
    assert n is not None, f"topic {topic!r} does not exist"
    bounds = run(offset_bounds(bootstrap, {TopicPartition(topic, p): None for p in range(n)},
                               {}, 10.0))
    return {tp.partition: end - start for tp, (start, end) in bounds.items()}


def _write(path: Path, rows: list[object], blank_after: int | None = None) -> Path:
    lines = [json.dumps(r, separators=(",", ":")) + "\n" for r in rows]
    if blank_after is not None:
        lines.insert(blank_after, "\n")  # a blank line is no message: later lines shift by one
    path.write_text("".join(lines))
    return path


# -- load: all or nothing before sending ----------------------------------------------------------


def test_a_bad_line_after_65536_good_ones_loads_nothing(kafka_bootstrap: str,
                                                        tmp_path: Path) -> None:
    job = Job(tmp_path, kafka_bootstrap)
    _write(tmp_path / "first.jsonl", [{"key": f"k{i}", "value": {"g": "a", "n": i}}
                                      for i in range(5)])
    assert "loaded 5 message(s)" in job.ok("load", "app.py:app", "events",
                                           "first.jsonl").stderr
    rows: list[object] = [{"key": f"k{i}", "value": {"g": "a", "n": i}} for i in range(70_000)]
    rows.append({"key": 7, "value": {"g": "a", "n": 70_000}})  # an int key on a StringSerde
    _write(tmp_path / "big.jsonl", rows, blank_after=1)  # so message 70,001 is on line 70,002

    bad = job.cli("load", "app.py:app", "events", "big.jsonl")
    assert bad.returncode == 2, bad.stderr
    assert sum(_held(kafka_bootstrap, f"events-{job.tag}").values()) == 5, bad.stderr
    assert len(job.dump("events")) == 5
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "big.jsonl:70002:" in bad.stderr and "nothing was loaded" in bad.stderr, bad.stderr

    # run --input goes the same way: nothing is appended, the line is named
    fed = job.cli("run", "app.py:app", "--input", "events=big.jsonl", "--append", "-q")
    assert fed.returncode == 2 and "big.jsonl:70002:" in fed.stderr, fed.stderr
    assert sum(_held(kafka_bootstrap, f"events-{job.tag}").values()) == 5


def test_a_bad_line_in_a_new_topic_creates_nothing(kafka_bootstrap: str, tmp_path: Path) -> None:
    job = Job(tmp_path, kafka_bootstrap)
    _write(tmp_path / "bad.jsonl", [{"key": "a", "value": {"g": "a"}}, {"key": 1, "value": {}}])
    bad = job.cli("load", "app.py:app", "events", "bad.jsonl")
    topic = f"events-{job.tag}"
    assert run(describe_topics(kafka_bootstrap, [topic]))[topic] is None, bad.stderr
    assert bad.returncode == 2 and "bad.jsonl:2:" in bad.stderr, bad.stderr


# -- load: a broker gone part way -----------------------------------------------------------------


class CuttingProxy(TcpProxy):
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target`` until ``cut_after`` bytes have gone
    to the broker (or ``cut()``): from then on nothing more reaches the broker, its answers to
    what it got still come back for a second, then every connection is closed and new ones are
    refused. A request cut in two never reaches the broker whole, and one it got whole is
    answered: what the broker holds is what it acknowledged."""

    def __init__(self, port: int, target: int, cut_after: int | None = None) -> None:
        super().__init__(port, target)
        self.cut_after = cut_after
        self.forwarded = 0
        self.cut_at: float | None = None
        self.closed = threading.Event()

    def start(self, only: str | None = None) -> CuttingProxy:
        super().start(only)
        return self

    def cut(self) -> None:
        if self.cut_at is None:
            self.cut_at = time.monotonic()

    def stop(self) -> None:
        self.cut()
        if self._thread is not None:
            self._thread.join(10)

    def _serving(self) -> bool:
        return self.cut_at is None or time.monotonic() < self.cut_at + 1.0

    def _admit(self, client: socket.socket) -> bool:
        return self.cut_at is None

    def _to_broker(self, data: bytes) -> bool:
        if self.cut_at is None and self.cut_after is not None \
                and self.forwarded + len(data) > self.cut_after:
            self.cut()
        if self.cut_at is not None:
            return False  # never reaches the broker
        self.forwarded += len(data)
        return True

    def _closed(self) -> None:
        self.closed.set()


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[CuttingProxy, TansuBroker, int]]:
    """A broker of the test's own behind a CuttingProxy (cut after 1.5 MB); the proxy's port."""
    port, behind = free_port(), free_port()
    proxy = CuttingProxy(port, behind, cut_after=1_500_000).start()
    broker = TansuBroker(tmp_path / "tansu.log", port=behind, advertised_port=port)
    broker.start()
    try:
        yield proxy, broker, port
    finally:
        broker.stop()
        proxy.stop()


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_broker_gone_mid_load_says_what_was_acknowledged_and_how_to_load_the_rest(
        proxied: tuple[CuttingProxy, TansuBroker, int], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, partitions: int) -> None:
    proxy, broker, port = proxied
    bootstrap = f"127.0.0.1:{port}"
    job = Job(tmp_path, bootstrap, partitions)
    total = 100_000
    rows = [{"key": f"k{i % 997}", "value": {"g": "a", "n": i}} for i in range(total)]
    # in a folder named as a clone of the project, under a name with a space: the command
    # handed back quotes the path, and runs as given
    (tmp_path / "my data" / "samza-dsl").mkdir(parents=True)
    path = _write(tmp_path / "my data" / "samza-dsl" / "big.jsonl", rows, blank_after=1)
    messages = JsonLines(str(path), [KV(r["key"], r["value"]) for r in rows],
                         [1] + list(range(3, total + 2)))
    streams = run(kafka_streams(job.app(monkeypatch), {}))
    with pytest.raises(PartialLoad) as info:
        run(kafka_load(streams, "events", messages, timeout=4.0,
                       load_command="samza-dsl load app.py:app events"))
    err = info.value
    text = str(err)
    assert proxy.cut_at is not None and proxy.closed.wait(10)
    done = sum(err.acked)
    assert 0 < done < total, text
    assert f"{done:,} of them were acknowledged" in text, text
    assert err.sent == [len([1 for r in rows if _partition(r["key"], partitions) == p])
                        for p in range(partitions)]
    for p in range(partitions):
        assert f"partition {p}: {err.acked[p]:,} of {err.sent[p]:,}" in text, text

    assert broker.port is not None
    back = TcpProxy(port, broker.port).start()  # the broker is back
    try:
        topic = f"events-{job.tag}"
        held = _held(bootstrap, topic)
        assert held == dict(enumerate(err.acked)), text  # the acknowledged ones, no more
        command = re.search(r"load them with `([^`]+)`", text)
        assert command is not None, text
        if partitions == 1:  # a prefix of the file went: its tail is the rest
            assert err.resume_line == done + 2 and err.rest is None, text
            assert f"tail -n +{done + 2} {shlex.quote(str(path))} " in command.group(1), text
        else:  # the rest is in a file of its own
            assert err.rest is not None and os.path.exists(err.rest), text
            assert len(Path(err.rest).read_text().splitlines()) == total - done
        resumed = subprocess.run(command.group(1), shell=True, cwd=tmp_path, env=job.env,
                                 capture_output=True, text=True, timeout=180)
        assert resumed.returncode == 0, resumed.stderr
        records = run(consume_all(bootstrap, topic, partitions, timeout=60))
        got = sorted(json.loads(v)["n"] for recs in records.values() for _, _, v in recs)
        assert got == list(range(total))  # every message once
        for p, recs in records.items():  # each in its key's partition, in the file's order
            ns = [json.loads(v)["n"] for _, _, v in recs]
            assert ns == sorted(ns)
            assert all(_partition(f"k{n % 997}", partitions) == p for n in ns)
    finally:
        back.stop()


def test_a_file_load_cut_off_in_a_later_chunk_counts_the_file_and_hands_back_the_rest(
        proxied: tuple[CuttingProxy, TansuBroker, int], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``samza-dsl load`` sends a file a chunk at a time: a cut in a later chunk speaks of the
    whole file, and the rest it hands back holds the chunk's unacknowledged messages and every
    line after the chunk."""
    proxy, broker, port = proxied
    bootstrap = f"127.0.0.1:{port}"
    job = Job(tmp_path, bootstrap, 3)
    total = 100_000
    rows = [{"key": f"k{i % 997}", "value": {"g": "a", "n": i}} for i in range(total)]
    path = _write(tmp_path / "big.jsonl", rows, blank_after=1)

    def lines() -> Iterator[tuple[int, object]]:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    r = json.loads(line)
                    yield lineno, KV(r["key"], r["value"])

    streams = run(kafka_streams(job.app(monkeypatch), {}))
    with pytest.raises(PartialLoad) as info:
        run(kafka_load_file(streams, "events", str(path), lines, timeout=4.0, chunk=7_000,
                            load_command="samza-dsl load app.py:app events"))
    err = info.value
    text = str(err)
    topic = f"events-{job.tag}"
    assert broker.port is not None
    back = TcpProxy(port, broker.port).start()
    try:
        done = sum(_held(bootstrap, topic).values())
        assert 7_000 < done < total, text  # whole chunks went before the cut
        assert f"loading {total:,} message(s)" in text, text
        assert f"{done:,} of them were acknowledged" in text, text
        assert f"The {total - done:,} other(s)" in text, text
        if err.rest is not None:  # cut inside a chunk: its rest, then the lines after it
            assert len(Path(err.rest).read_text().splitlines()) == total - done, text
        else:  # cut at a chunk's start: the file's tail
            assert err.resume_line == done + 2, text
        command = re.search(r"load them with `([^`]+)`", text)
        assert command is not None, text
        resumed = subprocess.run(command.group(1), shell=True, cwd=tmp_path, env=job.env,
                                 capture_output=True, text=True, timeout=180)
        assert resumed.returncode == 0, resumed.stderr
        records = run(consume_all(bootstrap, topic, 3, timeout=60))
        got = sorted(json.loads(v)["n"] for recs in records.values() for _, _, v in recs)
        assert got == list(range(total))  # every message once
    finally:
        back.stop()


def test_the_peak_memory_of_a_kafka_load_does_not_grow_with_its_file(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """``samza-dsl load`` into a topic holds a chunk of the file, not the file (a million lines
    took 660 MB when it held them all)."""
    import sys
    import tracemalloc

    peak_of = ("import resource, subprocess, sys\n"
               "proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
               "sys.stderr.write(proc.stderr)\n"
               "print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    job = Job(tmp_path, kafka_bootstrap, 3)
    n = 200_000
    big = tmp_path / "big.jsonl"
    with open(big, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"key": str(i % 5000), "value": {
                "g": "a", "id": i, "name": f"user-{i}", "tags": ["a", "b", "c"]}}) + "\n")
    small = tmp_path / "small.jsonl"
    small.write_text(big.open().readline())

    def peak(path: Path) -> int:
        proc = subprocess.run([sys.executable, "-c", peak_of, CLI, "load", "app.py:app",
                               "events", str(path)], cwd=tmp_path, env=job.env,
                              capture_output=True, text=True, timeout=300)
        rc, kib = proc.stdout.split()
        assert rc == "0", proc.stderr
        return int(kib) * 1024

    base, top = peak(small), peak(big)
    with open(big, encoding="utf-8") as f:
        lines = [next(f) for _ in range(n // 10)]
    tracemalloc.start()
    decoded = [json.loads(line) for line in lines]
    held = tracemalloc.get_traced_memory()[0] * 10  # the file's messages, all held at once
    tracemalloc.stop()
    del decoded
    assert top - base < min(held // 3, 48 << 20), ((top - base) >> 20, held >> 20)
    assert sum(_held(kafka_bootstrap, f"events-{job.tag}").values()) == n + 1


def _partition(key: str, partitions: int) -> int:
    from operators.hashing import partition_for
    return partition_for(key.encode(), partitions)


# -- dump -----------------------------------------------------------------------------------------


def test_dump_covers_dead_letters_intermediate_streams_and_changelogs(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    job = Job(tmp_path, kafka_bootstrap)
    rows = [{"key": f"k{i}", "value": {"g": "abc"[i % 3], "n": i}} for i in range(30)]
    _write(tmp_path / "in.jsonl", rows)
    job.ok("load", "app.py:app", "events", "in.jsonl")
    run(produce_each(kafka_bootstrap, f"events-{job.tag}", [(1, b"bad", b"{not json")]))
    job.ok("run", "app.py:app", "-q", "-c", "streams.events.samza.serde.error=dead-letter")

    (letter,) = job.dump(f"{job.name}-dead-letter")
    assert isinstance(letter, dict) and set(letter) == {"source", "error", "key", "value"}
    assert letter["key"] == "bad" and letter["value"] == "{not json"
    assert letter["source"].startswith("events/1/") and "decode" in letter["error"]

    middle = job.dump(f"{job.name}-partition_by-by-g")
    assert sorted((m["key"], m["value"]["n"]) for m in middle) \
        == sorted((r["value"]["g"], r["value"]["n"]) for r in rows)  # type: ignore[index]

    finals: dict[str, int] = {}
    for entry in job.dump(f"{job.name}-totals-changelog"):
        finals[entry["key"]] = entry["value"]
    assert finals == {"a": 10, "b": 10, "c": 10}

    unknown = job.cli("dump", "app.py:app", "nope")
    assert unknown.returncode == 2
    for name in ("events", "counts", f"{job.name}-dead-letter", f"{job.name}-totals-changelog",
                 f"{job.name}-partition_by-by-g"):
        assert name in unknown.stderr, unknown.stderr


def test_dump_of_a_topic_that_does_not_exist_is_an_error(kafka_bootstrap: str,
                                                         tmp_path: Path) -> None:
    job = Job(tmp_path, kafka_bootstrap)
    missing = job.cli("dump", "app.py:app", "events")
    assert missing.returncode == 2 and missing.stdout == ""
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert f"'events-{job.tag}' does not exist" in missing.stderr
    assert "samza-dsl load app.py:app events" in missing.stderr, missing.stderr
    for stream in ("counts", f"{job.name}-dead-letter", f"{job.name}-totals-changelog"):
        proc = job.cli("dump", "app.py:app", stream)
        assert proc.returncode == 2 and "samza-dsl run app.py:app" in proc.stderr, proc.stderr
    topics = [f"events-{job.tag}", f"counts-{job.tag}", f"{job.name}-dead-letter"]
    assert set(run(describe_topics(kafka_bootstrap, topics)).values()) == {None}  # none made


def test_dump_limit_reads_only_the_tail_and_a_whole_dump_reads_a_batch_at_a_time(
        kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = Job(tmp_path, kafka_bootstrap)
    total = 30_000
    rows = [{"key": f"k{i % 50}", "value": {"g": "a", "n": i}} for i in range(total)]
    _write(tmp_path / "in.jsonl", rows)
    job.ok("load", "app.py:app", "events", "in.jsonl")
    app = job.app(monkeypatch)

    reads: list[int] = []
    original = TopicReader.read_with_offsets

    def counted(self: TopicReader, physical: str, partition: int, offset: int,
                max_records: int) -> object:
        got = original(self, physical, partition, offset, max_records)
        reads.append(len(got[0]))
        return got
    monkeypatch.setattr(TopicReader, "read_with_offsets", counted)

    whole = list(_dump(app, None, offsets=True))
    assert len(whole) == total and len(reads) > 3 and max(reads) <= 4096
    reads.clear()
    last = list(_dump(app, 100, offsets=True))
    assert last == whole[-100:]
    assert sum(reads) <= 200, reads  # the tail, not the topic
    reads.clear()
    spanning = list(_dump(app, 12_000))  # more than a partition holds
    assert [json.loads(x) for x in spanning] == [json.loads(x)["message"] for x in whole[-12_000:]]
    assert sum(reads) < 13_000, sum(reads)


def test_a_fetch_that_gets_nothing_fails_within_its_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port, behind = free_port(), free_port()
    proxy = CuttingProxy(port, behind).start()
    broker = TansuBroker(tmp_path / "tansu.log", port=behind, advertised_port=port)
    broker.start()
    try:
        job = Job(tmp_path, f"127.0.0.1:{port}")
        _write(tmp_path / "in.jsonl", [{"key": f"k{i}", "value": {"g": "a", "n": i}}
                                       for i in range(300)])
        job.ok("load", "app.py:app", "events", "in.jsonl")
        streams = run(kafka_streams(job.app(monkeypatch), {}))
        topic = f"events-{job.tag}"
        with TopicReader(streams, fetch_timeout=2.0) as reader:
            offsets, _ = reader.read_with_offsets(topic, 0, 0, 10)
            assert offsets
            for p in (1, 2):
                reader.bounds(topic, p)
            proxy.cut()
            assert proxy.closed.wait(10)
            started = time.monotonic()
            with pytest.raises(SamzaError, match=rf"topic '{topic}' partition 1: no record came "
                                                 rf"from offset 0 within 2 s"):
                reader.read_with_offsets(topic, 1, 0, 10)
            assert time.monotonic() - started < 8
    finally:
        broker.stop()
        proxy.stop()


# -- retention ------------------------------------------------------------------------------------


def test_topics_the_job_creates_get_the_streams_retention(kafka_bootstrap: str,
                                                          tmp_path: Path) -> None:
    job = Job(tmp_path, kafka_bootstrap)
    _write(tmp_path / "in.jsonl", [{"key": "k", "value": {"g": "a", "n": 1}}])
    middle = f"{job.name}-partition_by-by-g"
    config = ["-c", "streams.events.retention.ms=7200000",
              "-c", "streams.counts.retention.ms=3600000",
              "-c", "streams.counts.retention.bytes=1048576",
              "-c", f"streams.{middle}.retention.ms=600000"]
    job.ok("load", "app.py:app", "events", "in.jsonl", *config)  # load creates the input
    job.ok("run", "app.py:app", "-q", *config)  # the job creates the others
    assert run(topic_configs(kafka_bootstrap, f"events-{job.tag}")) \
        .get("retention.ms") == "7200000"
    counts = run(topic_configs(kafka_bootstrap, f"counts-{job.tag}"))
    assert counts.get("retention.ms") == "3600000" and counts.get("retention.bytes") == "1048576"
    assert run(topic_configs(kafka_bootstrap, middle)).get("retention.ms") == "600000"
    # a stream without retention keys keeps the broker's defaults
    dead = run(topic_configs(kafka_bootstrap, f"{job.name}-dead-letter"))
    # (Apache Kafka describes its defaults, 7 days and no size cap; tansu only what is set)
    assert dead.get("retention.ms", "604800000") == "604800000"
    assert dead.get("retention.bytes", "-1") == "-1"


def _dump(app: object, limit: int | None, offsets: bool = False) -> list[bytes]:
    """The lines of ``samza-dsl dump APP events`` on Kafka, in this process."""
    return list(KafkaJobSystem().dump_lines(app, {}, "events", limit, offsets=offsets,
                                            uncommitted=False, app_ref="app.py:app"))
