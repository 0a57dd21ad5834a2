"""``samza-dsl load``, ``dump``, ``run --sample``/``--input``/``--append``/``--skip`` on a job whose
streams are topics of the real (tansu) broker, through the console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

CLI = str(Path(sys.executable).parent / "samza-dsl")

APP = '''
import os
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

TAG = os.environ["TEST_TAG"]
kafka = KafkaSystem("kafka", bootstrap_servers=os.environ["TEST_KAFKA"])
app = StreamApplication("cli-io-" + TAG, config={"job.default.system": "kafka"})
serde = KVSerde(StringSerde(), JsonSerde())
events = app.input(kafka.input("events", serde=serde, partitions=3,
                               physical_name="events-" + TAG))
doubled = app.output(kafka.output("doubled", serde=serde, partitions=3,
                                  physical_name="doubled-" + TAG))


def double(m):
    return KV(m.key, {"n": m.value["n"] * 2})


events.map(double, name="double").send_to(doubled)


def sample_input(n):
    return {"events": [KV(f"k{i % 7}", {"n": i}) for i in range(n)]}
'''


def test_load_dump_and_run_inputs_on_kafka_topics(kafka_bootstrap: str, tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    env = {**os.environ, "TEST_KAFKA": kafka_bootstrap, "TEST_TAG": uuid.uuid4().hex[:8]}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CLI, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)

    def ok(*args: str) -> subprocess.CompletedProcess[str]:
        proc = cli(*args)
        assert proc.returncode == 0, proc.stderr
        return proc

    # --sample loads the topic (today: silently nothing)
    first = ok("run", "app.py:app", "--sample", "40", "-q", "--show", "0")
    assert "loaded 40 message(s) into events" in first.stderr
    assert "doubled: 40 message(s)" in first.stdout and "in: 40 new message(s)" in first.stdout
    dumped = [json.loads(ln) for ln in ok("dump", "app.py:app", "events").stdout.splitlines()]
    assert sorted(d["value"]["n"] for d in dumped) == list(range(40))
    out = [json.loads(ln) for ln in ok("dump", "app.py:app", "doubled").stdout.splitlines()]
    assert sorted(d["value"]["n"] for d in out) == [2 * i for i in range(40)]
    last = [json.loads(ln) for ln in
            ok("dump", "app.py:app", "events", "--limit", "3", "--offsets").stdout.splitlines()]
    assert len(last) == 3 and all({"partition", "offset", "message"} <= set(d) for d in last)

    # the same sample again: said, not loaded; another one needs --append
    again = ok("run", "app.py:app", "--sample", "40", "-q")
    assert "already holds the sample of 40" in again.stderr and "nothing new" in again.stdout
    other = cli("run", "app.py:app", "--sample", "5", "-q")
    assert other.returncode == 2 and "already holds 40 message(s)" in other.stderr
    replace = cli("run", "app.py:app", "--sample", "5", "--replace", "-q")
    assert replace.returncode == 2 and "Kafka topics" in replace.stderr

    # load a file with a poison record; run fails on it; --skip passes over it once
    rows = [{"key": "p", "value": {"n": 100}}, {"key": "p", "value": {"m": 1}},
            {"key": "p", "value": {"n": 101}}]
    (tmp_path / "more.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    loaded = ok("load", "app.py:app", "events", "more.jsonl")
    assert "loaded 3 message(s) into events" in loaded.stderr
    failed = cli("run", "app.py:app", "-q")
    assert failed.returncode == 2 and "KeyError: 'n'" in failed.stderr, failed.stderr
    hint = failed.stderr.split("--skip ")[1].split("`")[0]
    skipped = ok("run", "app.py:app", "--skip", hint, "-q", "--show", "5")
    assert "skipped: 1 record(s) as --skip asked" in skipped.stdout
    assert "in: 2 new message(s)" in skipped.stdout
    assert "{'n': 200}" in skipped.stdout and "{'n': 202}" in skipped.stdout

    (tmp_path / "clean.jsonl").write_text(json.dumps({"key": "q", "value": {"n": 7}}) + "\n")
    refused = cli("run", "app.py:app", "--input", "events=clean.jsonl", "-q")
    assert refused.returncode == 2 and "--append" in refused.stderr
    appended = ok("run", "app.py:app", "--input", "events=clean.jsonl", "--append", "-q")
    assert "in: 1 new message(s)" in appended.stdout and "{'n': 14}" in appended.stdout

    # --skip of a record already processed says so; of a partition the topic lacks is an error
    stale = ok("run", "app.py:app", "--skip", hint, "-q", "--show", "0")
    assert f"--skip {hint} not applied: an earlier run processed it" in stale.stderr
    assert "skipped:" not in stale.stdout
    stream, partition, _ = hint.split(":")
    past = ok("run", "app.py:app", "--skip", f"{stream}:{partition}:100000", "-q", "--show", "0")
    assert f"--skip {stream}:{partition}:100000 not applied: partition {partition} of events " \
           f"ends at offset" in past.stderr
    wrong = cli("run", "app.py:app", "--skip", "events:3:0", "-q")
    assert wrong.returncode == 2 and "input 'events' has 3 partition(s)" in wrong.stderr
    # a run of several containers sums up as one: it resumed, and found nothing new
    both = ok("run", "app.py:app", "--containers", "3", "-q", "--show", "0")
    assert "resumed after the checkpoint" in both.stdout and "nothing new" in both.stdout
    assert "in: 0 new message(s) (0 from events)" in both.stdout


def test_load_dump_status_and_reset_take_the_flags_of_a_group_run(kafka_bootstrap: str,
                                                                  tmp_path: Path) -> None:
    # a run's own line (`run APP --follow --container-id 0 -c job.coordinator=kafka`) names
    # the job: the commands that read or reset it take the same flags, --follow and the
    # container's among them (they were refused with "add --follow", then as unrecognized)
    (tmp_path / "app.py").write_text(APP)
    env = {**os.environ, "TEST_KAFKA": kafka_bootstrap, "TEST_TAG": uuid.uuid4().hex[:8]}
    flags = ("-c", "job.coordinator=kafka", "--follow", "--container-id", "0")

    def ok(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([CLI, *args, *flags], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "--follow" not in proc.stderr, proc.stderr
        return proc

    rows = [{"key": f"k{i}", "value": {"n": i}} for i in range(3)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "loaded 3 message(s)" in ok("load", "app.py:app", "events", "in.jsonl").stderr
    dumped = [json.loads(ln) for ln in ok("dump", "app.py:app", "events").stdout.splitlines()]
    assert sorted(d["value"]["n"] for d in dumped) == [0, 1, 2]
    # a run of its own (bounded: its containers in this process), so that status has a job
    ran = subprocess.run([CLI, "run", "app.py:app", "-q"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    status = json.loads(ok("status", "app.py:app", "--json").stdout)
    assert status["job"] == f"cli-io-{env['TEST_TAG']}-1", status
    ok("reset", "app.py:app")


def test_a_topic_named_in_config_is_the_one_load_run_and_dump_use(kafka_bootstrap: str,
                                                                 tmp_path: Path) -> None:
    # -c streams.<id>.samza.physical.name: load wrote the topic it names, run read the
    # application's own (the run found nothing, or failed on a topic that did not exist)
    (tmp_path / "app.py").write_text(APP)
    tag = uuid.uuid4().hex[:8]
    env = {**os.environ, "TEST_KAFKA": kafka_bootstrap, "TEST_TAG": tag}
    flags = ("-c", f"streams.events.samza.physical.name=renamed-events-{tag}",
             "-c", f"streams.doubled.samza.physical.name=renamed-doubled-{tag}")

    def ok(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([CLI, *args, *flags], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc

    run = subprocess.run([sys.executable, "-c", (
        "import asyncio, sys\nfrom runtime.kafka.admin import TopicSpec, ensure_topics\n"
        f"asyncio.run(ensure_topics({kafka_bootstrap!r}, [TopicSpec('renamed-events-{tag}', 3)"
        f", TopicSpec('renamed-doubled-{tag}', 3)]))")], capture_output=True, text=True,
        timeout=60)
    assert run.returncode == 0, run.stderr
    rows = [{"key": f"k{i}", "value": {"n": i}} for i in range(5)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ok("load", "app.py:app", "events", "in.jsonl")
    ran = ok("run", "app.py:app", "-q", "--show", "0")
    assert "in: 5 new message(s)" in ran.stdout, ran.stdout
    out = [json.loads(ln) for ln in ok("dump", "app.py:app", "doubled").stdout.splitlines()]
    assert sorted(m["value"]["n"] for m in out) == [0, 2, 4, 6, 8]


def test_job_dir_given_in_the_application_is_where_a_kafka_job_keeps_its_state(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    # job.dir in StreamApplication(config=...) only: load, run, status and dump keep to it,
    # and nothing lands in ./.samza of the working directory
    home = tmp_path / "state-here"
    (tmp_path / "app.py").write_text(APP.replace(
        'config={"job.default.system": "kafka"}',
        f'config={{"job.default.system": "kafka", "job.dir": {str(home)!r}}}'))
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "TEST_KAFKA": kafka_bootstrap, "TEST_TAG": uuid.uuid4().hex[:8],
           "PYTHONPATH": str(tmp_path)}

    def ok(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([CLI, *args], cwd=work, env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc

    app = str(tmp_path / "app.py") + ":app"
    ok("run", app, "--sample", "10", "-q", "--show", "0")
    status = json.loads(ok("status", app, "--json").stdout)
    assert status["job"].startswith("cli-io-"), status
    assert len(ok("dump", app, "doubled").stdout.splitlines()) == 10
    assert home.is_dir() and any(home.rglob("*")), "nothing was kept in the job.dir given"
    assert not (work / ".samza").exists() and not (tmp_path / ".samza").exists()
