"""A broker that lost everything while the job was stopped (an empty broker back on the same
address, the input topic created again with new events): the next run is one clear error that
the brokers no longer hold the checkpoints the local stores were built from, never a run that
counts on top of the old stores; ``samza-dsl reset`` starts the job over. Real tansu brokers on
127.0.0.1, the job through the console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
from kafka_helpers import consume_all, create_topic, produce_each, run

from runtime import LocalRunner
from runtime.kafka.admin import delete_topics, describe_topics
from runtime.kafka.outage import KafkaDataLost
from samza_dsl import KV, Context, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem
from samza_dsl.testing.kafka_broker import TansuBroker

CLI = str(Path(sys.executable).parent / "samza-dsl")

APP = '''
import os
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

TAG = os.environ["TEST_TAG"]
kafka = KafkaSystem("kafka", bootstrap_servers=os.environ["TEST_KAFKA"])
app = StreamApplication("lost-" + TAG, config={"task.commit.ms": 200})
serde = KVSerde(StringSerde(), JsonSerde())
events = app.input(kafka.input("events", serde=serde, physical_name="events-" + TAG))
counts = app.output(kafka.output("counts", serde=serde, physical_name="counts-" + TAG))
app.table("counts", serde=serde, changelog=os.environ["TEST_CHANGELOG"] == "1")


class Count:
    def init(self, ctx):
        self.table = ctx.table("counts")

    def __call__(self, kv):
        n = (self.table.get(kv.key) or 0) + 1
        self.table.put(kv.key, n)
        return KV(kv.key, n)


events.map(Count(), name="count").send_to(counts)
'''



def _events(start: int, n: int) -> list[tuple[int, bytes | None, bytes | None]]:
    """Keys k0..k4, each on its own partition of two, each record its own batch."""
    return [(i % 5 % 2, f"k{i % 5}".encode(), json.dumps({"i": i}).encode())
            for i in range(start, start + n)]


def _counts(bootstrap: str, tag: str) -> list[tuple[str, int]]:
    """The (key, count) records of the output topic, in their order per key."""
    if run(describe_topics(bootstrap, [f"counts-{tag}"]))[f"counts-{tag}"] is None:
        return []
    records = run(consume_all(bootstrap, f"counts-{tag}", 2))
    return [(k.decode(), json.loads(v)) for recs in records.values() for _, k, v in recs]


def _finals(counts: list[tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, n in counts:
        out[k] = max(out.get(k, 0), n)
    return out


@pytest.mark.parametrize("changelog", [True, False], ids=["changelog", "no-changelog"])
def test_stores_whose_checkpoints_the_broker_lost_are_an_error_until_reset(
        broker: TansuBroker, tmp_path: Path, changelog: bool) -> None:
    tag = uuid.uuid4().hex[:8]
    job = f"lost-{tag}-1"
    (tmp_path / "app.py").write_text(APP)
    env = {**os.environ, "TEST_KAFKA": broker.bootstrap, "TEST_TAG": tag,
           "TEST_CHANGELOG": "1" if changelog else "0"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CLI, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)

    run(create_topic(broker.bootstrap, f"events-{tag}", 2))
    run(produce_each(broker.bootstrap, f"events-{tag}", _events(0, 30)))  # 6 per key
    first = cli("run", "app.py:app", "-q", "--show", "0")
    assert first.returncode == 0, first.stderr
    assert _finals(_counts(broker.bootstrap, tag)) == {f"k{i}": 6 for i in range(5)}

    # the broker comes back empty on the same address; the input is created again, 1 per key
    broker.stop()
    broker.start()
    run(create_topic(broker.bootstrap, f"events-{tag}", 2))
    run(produce_each(broker.bootstrap, f"events-{tag}", _events(100, 5)))

    stale = cli("run", "app.py:app", "-q", "--show", "0")
    lines = stale.stderr.splitlines()
    assert stale.returncode == 2, (stale.returncode, stale.stderr, stale.stdout)
    assert "Traceback" not in stale.stderr, stale.stderr
    errors = [ln for ln in lines if ln.startswith("samza-dsl run: error: ")]
    assert len(errors) == 1, stale.stderr
    error = errors[0]
    store = tmp_path / ".samza" / job / "stores" / "counts"
    for fragment in (f"job {job!r}", f"Kafka at {broker.bootstrap}",
                     f"checkpoint topic '__samza_checkpoint_{job}' is empty",
                     "store 'counts' of task 'Partition 0'", str(store.parent),
                     "samza-dsl reset app.py:app"):
        assert fragment in error, f"{fragment!r} not in {error!r}"
    if changelog:  # the local copy's changelog offset, and where the broker's changelog ends
        assert "is at changelog offset 3" in error, error
        assert f"changelog topic '{job}-counts-changelog' partition 0 ends at offset 0" in error
    else:
        assert "holds 3 keys (it has no changelog)" in error, error
    assert _counts(broker.bootstrap, tag) == []  # nothing counted on top of the old stores
    assert (store / "Partition-0" / "data.mdb").exists()  # nothing removed either

    # reset starts the job over: the local stores go, and the new events count from 1
    reset = cli("reset", "app.py:app")
    assert reset.returncode == 0, reset.stderr
    assert f"reset job {job}: " in reset.stderr and f"stores in {store.parent}" in reset.stderr
    again = cli("run", "app.py:app", "-q", "--show", "0")
    assert again.returncode == 0, again.stderr
    assert sorted(_counts(broker.bootstrap, tag)) == [(f"k{i}", 1) for i in range(5)]


class _Count:
    def init(self, ctx: Context) -> None:
        self.table = ctx.table("counts")

    def __call__(self, kv: KV[str, object]) -> KV[str, int]:
        n = (self.table.get(kv.key) or 0) + 1
        self.table.put(kv.key, n)
        return KV(kv.key, n)


def _counter(bootstrap: str, tag: str, **config: object) -> StreamApplication:
    """The app above, built here: a table without a changelog."""
    app = StreamApplication(f"lost-{tag}", config={"task.commit.ms": 200, **config})
    serde = KVSerde(StringSerde(), JsonSerde())
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    events = app.input(kafka.input("events", serde=serde, physical_name=f"events-{tag}"))
    counts = app.output(kafka.output("counts", serde=serde, physical_name=f"counts-{tag}"))
    app.table("counts", serde=serde, changelog=False)
    events.map(_Count(), name="count").send_to(counts)
    return app


@pytest.mark.parametrize("containers", [1, 2])
def test_a_deleted_checkpoint_topic_with_the_stores_left_is_an_error(
        kafka_bootstrap: str, tmp_path: Path, containers: int) -> None:
    tag = uuid.uuid4().hex[:8]
    job = f"lost-{tag}-1"
    run(create_topic(kafka_bootstrap, f"events-{tag}", 2))
    run(produce_each(kafka_bootstrap, f"events-{tag}", _events(0, 10)))  # 2 per key
    app = _counter(kafka_bootstrap, tag, **{"job.container.count": containers})
    job_dir = tmp_path / "job dir"
    config = {"job.dir": str(job_dir)}
    LocalRunner(app, config).run()
    assert _finals(_counts(kafka_bootstrap, tag)) == {f"k{i}": 2 for i in range(5)}

    # the checkpoint topic alone goes (the broker keeps the rest); new events come in
    assert run(delete_topics(kafka_bootstrap, [f"__samza_checkpoint_{job}"])) == [
        f"__samza_checkpoint_{job}"]
    run(produce_each(kafka_bootstrap, f"events-{tag}", _events(10, 5)))
    with pytest.raises(KafkaDataLost) as err:
        LocalRunner(app, config).run()
    text = str(err.value)
    assert "\n" not in text, text
    for fragment in (f"job {job!r}", f"checkpoint topic '__samza_checkpoint_{job}' is empty",
                     f"{job_dir / 'stores'} holds the local stores of earlier runs",
                     "store 'counts' of task 'Partition 0' holds 3 keys (it has no changelog)",
                     "store 'counts' of task 'Partition 1' holds 2 keys (it has no changelog)",
                     f"`samza-dsl reset APP -c job.dir='{job_dir}'`"):
        assert fragment in text, f"{fragment!r} not in {text!r}"
    assert len(_counts(kafka_bootstrap, tag)) == 10  # nothing counted on top of the stores


def test_reset_of_a_kafka_job_starts_it_over_from_its_inputs(kafka_bootstrap: str,
                                                             tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    job = f"lost-{tag}-1"
    (tmp_path / "app.py").write_text(APP)
    env = {**os.environ, "TEST_KAFKA": kafka_bootstrap, "TEST_TAG": tag, "TEST_CHANGELOG": "1"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([CLI, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc

    run(create_topic(kafka_bootstrap, f"events-{tag}", 2))
    run(produce_each(kafka_bootstrap, f"events-{tag}", _events(0, 15)))  # 3 per key
    cli("run", "app.py:app", "-q", "--show", "0")
    progress = [f"__samza_checkpoint_{job}", f"{job}-counts-changelog", f"{job}-dead-letter"]
    assert None not in run(describe_topics(kafka_bootstrap, progress)).values()

    reset = cli("reset", "app.py:app", "--outputs")
    for name in [*progress, f"counts-{tag}"]:
        assert f"topic {name}" in reset.stderr, reset.stderr
    assert f"stores in {tmp_path / '.samza' / job / 'stores'}" in reset.stderr
    gone = run(describe_topics(kafka_bootstrap, [*progress, f"counts-{tag}", f"events-{tag}"]))
    assert gone == {**dict.fromkeys([*progress, f"counts-{tag}"]), f"events-{tag}": 2}
    assert not (tmp_path / ".samza" / job / "stores").exists()

    # the next run reads its inputs from the start, into an empty state and output
    cli("run", "app.py:app", "-q", "--show", "0")
    assert sorted(_counts(kafka_bootstrap, tag)) == sorted(
        (f"k{i}", n) for i in range(5) for n in (1, 2, 3))
    again = cli("reset", "app.py:app")  # outputs stay without --outputs
    assert f"topic counts-{tag}" not in again.stderr and len(_counts(kafka_bootstrap, tag)) == 15


@pytest.mark.parametrize("lost", ["input", "changelog"])
def test_a_topic_behind_the_checkpoint_is_an_error_naming_reset_which_starts_over(
        kafka_bootstrap: str, tmp_path: Path, lost: str) -> None:
    """The checkpoint topic intact, an input or changelog topic deleted and created again with
    fewer records than the checkpoint read (offsets went backwards)."""
    tag = uuid.uuid4().hex[:8]
    job = f"lost-{tag}-1"
    run(create_topic(kafka_bootstrap, f"events-{tag}", 2))
    run(produce_each(kafka_bootstrap, f"events-{tag}", _events(0, 20)))
    app = _counter(kafka_bootstrap, tag, **{"stores.counts.changelog": f"{job}-counts-changelog"})
    config = {"job.dir": str(tmp_path / "job")}
    LocalRunner(app, config).run()
    before = Counter(_counts(kafka_bootstrap, tag))
    topic = {"input": f"events-{tag}", "changelog": f"{job}-counts-changelog"}[lost]
    run(delete_topics(kafka_bootstrap, [topic]))
    run(create_topic(kafka_bootstrap, topic, 2, compacted=lost == "changelog"))
    if lost == "input":
        run(produce_each(kafka_bootstrap, topic, _events(100, 5)))
    with pytest.raises(KafkaDataLost) as err:
        LocalRunner(app, config).run()
    text = str(err.value)
    assert f"topic {topic!r} partition 0" in text and "below the job's checkpoint" in text, text
    assert f"`samza-dsl reset APP -c job.dir={tmp_path / 'job'}` deletes its checkpoint topic " \
           f"'__samza_checkpoint_{job}'" in text, text

    from runtime.kafka.reset import kafka_reset  # (after the error: a module of this change)

    name, gone = run(kafka_reset(app, config))
    assert name == job and f"topic __samza_checkpoint_{job}" in gone, gone
    LocalRunner(app, config).run()  # from the start of the inputs, into empty stores
    events = 5 if lost == "input" else 20
    finals = _finals(list((Counter(_counts(kafka_bootstrap, tag)) - before).elements()))
    assert finals == {f"k{i}": events // 5 for i in range(5)}, finals
