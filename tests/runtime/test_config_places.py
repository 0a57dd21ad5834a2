"""A config key means the same wherever it is given. Precedence, lowest first: a key's default,
the planner's, the application's own (``StreamApplication(config=...)``), each
``--config-file`` in order, then ``-c`` (or a runner's ``config=``).

The walk: every key ``samza-dsl config`` lists is given a value that is not its default, in
each place alone, and the job's config (``samza-dsl config --app``, and the job a runner
builds) holds that value from that place. Then the keys that decide where a job's state and
streams are (job.dir, systems.<name>.path, job.name and job.id, a stream's physical name, a
store's changelog) are given in each place to real runs, and the files and streams land where
they say."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime.kafka.job import KafkaJob
from runtime.local.log import LocalLog
from runtime.local.system import LocalJob
from runtime.ops.cli import main
from runtime.ops.loader import load_app
from runtime.runner import LocalRunner
from samza_dsl.config import key_reference, validate_config
from samza_dsl.errors import ConfigError
from samza_dsl.jobconfig import job_config

HERE = Path(__file__).resolve().parent
APP = str(HERE / "places_app.py") + ":app"
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")

#: each key of `samza-dsl config`, as the places app names it, and a value other than its default
VALUES: dict[str, tuple[str, str]] = {
    "job.bounded.stall.ms": ("job.bounded.stall.ms", "4000"),
    "job.changelog.system": ("job.changelog.system", "local"),
    "job.container.count": ("job.container.count", "2"),
    "job.container.id": ("job.container.id", "1"),
    "job.container.thread.pool.size": ("job.container.thread.pool.size", "3"),
    "job.coordinator": ("job.coordinator", "static"),
    "job.default.system": ("job.default.system", "local"),
    "job.dir": ("job.dir", "state-dir"),
    "job.elasticity.factor": ("job.elasticity.factor", "2"),
    "job.health.host": ("job.health.host", "127.0.0.2"),
    "job.health.liveness.ms": ("job.health.liveness.ms", "9000"),
    "job.health.port": ("job.health.port", "0"),
    "job.id": ("job.id", "7"),
    "job.intermediate.stream.partitions": ("job.intermediate.stream.partitions", "3"),
    "job.kafka.partition.check.ms": ("job.kafka.partition.check.ms", "7000"),
    "job.kafka.unavailable.timeout.ms": ("job.kafka.unavailable.timeout.ms", "5000"),
    "job.name": ("job.name", "renamed"),
    "job.processing.guarantee": ("job.processing.guarantee", "exactly-once"),
    "job.standbytasks.replication.factor": ("job.standbytasks.replication.factor", "2"),
    "metrics.operators": ("metrics.operators", "false"),
    "metrics.reporter.interval.ms": ("metrics.reporter.interval.ms", "2500"),
    "metrics.reporter.json.path": ("metrics.reporter.json.path", "metrics.json"),
    "metrics.reporter.prometheus.host": ("metrics.reporter.prometheus.host", "127.0.0.3"),
    "metrics.reporter.prometheus.port": ("metrics.reporter.prometheus.port", "0"),
    "metrics.reporters": ("metrics.reporters", "json"),
    "task.async.commit": ("task.async.commit", "true"),
    "task.batch.handout": ("task.batch.handout", "false"),
    "task.callback.timeout.ms": ("task.callback.timeout.ms", "8000"),
    "task.checkpoint.system": ("task.checkpoint.system", "local"),
    "task.commit.ms": ("task.commit.ms", "1500"),
    "task.join.partition.check": ("task.join.partition.check", "warn"),
    "task.max.concurrency": ("task.max.concurrency", "4"),
    "task.progress.ms": ("task.progress.ms", "-1"),
    "task.shutdown.ms": ("task.shutdown.ms", "12000"),
    "task.window.ms": ("task.window.ms", "500"),
    "streams.<id>.partitions": ("streams.events.partitions", "2"),
    "streams.<id>.retention.bytes": ("streams.events.retention.bytes", "1048576"),
    "streams.<id>.retention.ms": ("streams.events.retention.ms", "3600000"),
    "streams.<id>.samza.broadcast": ("streams.events.samza.broadcast", "false"),
    "streams.<id>.samza.intermediate": ("streams.events.samza.intermediate", "false"),
    "streams.<id>.samza.physical.name": ("streams.events.samza.physical.name", "events-v2"),
    "streams.<id>.samza.serde.error": ("streams.events.samza.serde.error", "dead-letter"),
    "streams.<id>.samza.system": ("streams.events.samza.system", "local"),
    "query.enabled": ("query.enabled", "true"),
    "query.host": ("query.host", "127.0.0.2"),
    "query.port": ("query.port", "18766"),
    "query.token": ("query.token", "env:PLACES_QUERY_TOKEN"),
    "stores.<name>.changelog": ("stores.counts.changelog", "local.counts-log"),
    "stores.<name>.changelog.compaction": ("stores.counts.changelog.compaction", "false"),
    "stores.<name>.changelog.delete.retention.ms": (
        "stores.counts.changelog.delete.retention.ms", "60000"),
    "stores.<name>.object.cache.size": ("stores.counts.object.cache.size", "50"),
    "stores.<name>.pane.cache.size": ("stores.counts.pane.cache.size", "60"),
    "stores.<name>.write.batch.size": ("stores.counts.write.batch.size", "70"),
    "systems.<name>.samza.factory": ("systems.local.samza.factory", "local"),
    "systems.<name>.path": ("systems.local.path", "the-log"),
    "systems.<name>.log.max.bytes": ("systems.local.log.max.bytes", "268435456"),
    "systems.<name>.bootstrap.servers": ("systems.kafka.bootstrap.servers", "127.0.0.1:19092"),
    "systems.<name>.consumer.*": ("systems.kafka.consumer.fetch.max.wait.ms", "250"),
    "systems.<name>.producer.*": ("systems.kafka.producer.linger.ms", "7"),
    "systems.<name>.replication.factor": ("systems.kafka.replication.factor", "2"),
    "systems.<name>.min.insync.replicas": ("systems.kafka.min.insync.replicas", "1"),
    "systems.<name>.security.protocol": ("systems.kafka.security.protocol", "SASL_SSL"),
    "systems.<name>.sasl.mechanism": ("systems.kafka.sasl.mechanism", "SCRAM-SHA-256"),
    "systems.<name>.sasl.username": ("systems.kafka.sasl.username", "places-app"),
    "systems.<name>.sasl.password": ("systems.kafka.sasl.password", "env:PLACES_PASSWORD"),
    "systems.<name>.ssl.cafile": ("systems.kafka.ssl.cafile", "ca.pem"),
    "systems.<name>.ssl.certfile": ("systems.kafka.ssl.certfile", "client.pem"),
    "systems.<name>.ssl.keyfile": ("systems.kafka.ssl.keyfile", "client-key.pem"),
    "systems.<name>.ssl.key.password": ("systems.kafka.ssl.key.password", "file:key-password"),
    "systems.<name>.ssl.check.hostname": ("systems.kafka.ssl.check.hostname", "false"),
    "tracing.enabled": ("tracing.enabled", "true"),
    "tracing.exporter": ("tracing.exporter", "memory"),
    "tracing.otlp.endpoint": ("tracing.otlp.endpoint", "http://127.0.0.1:4319"),
    "tracing.sample.ratio": ("tracing.sample.ratio", "0.5"),
    "user.*": ("user.greeting", "hello"),
}
#: a Kafka system's security keys: each is given with the others (a SASL_SSL login with a
#: client certificate), whose files the test makes
SECURITY = {ref for ref in VALUES if ref.startswith(("systems.<name>.security.",
                                                     "systems.<name>.sasl.",
                                                     "systems.<name>.ssl."))}
KAFKA_ONLY = {"systems.<name>.bootstrap.servers", "systems.<name>.consumer.*",
              "systems.<name>.producer.*", "job.kafka.unavailable.timeout.ms",
              "job.kafka.partition.check.ms",
              "systems.<name>.replication.factor", "systems.<name>.min.insync.replicas",
              *SECURITY}
PLACES = ["application", "config-file", "-c"]


def test_the_walk_covers_every_key_samza_dsl_config_lists() -> None:
    assert sorted(VALUES) == sorted(r.key for r in key_reference())


def _env(monkeypatch: pytest.MonkeyPatch, ref: str, config: dict[str, str]) -> None:
    monkeypatch.setenv("SAMZA_PLACES_CONFIG", json.dumps(config))
    monkeypatch.setenv("SAMZA_PLACES_SYSTEM", "kafka" if ref in KAFKA_ONLY else "local")


def _shown(capsys: pytest.CaptureFixture[str], args: list[str]) -> dict[str, tuple[str, str]]:
    assert main(["config", "--app", APP, *args]) == 0
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        key, _, rest = line.partition(" ")
        value, _, source = rest.strip().rpartition("  (")
        rows[key] = (value.strip(), source.rstrip(")"))
    return rows


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("ref", sorted(VALUES))
def test_each_key_from_each_place_is_the_jobs(ref: str, place: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    key, raw = VALUES[ref]
    want = repr(validate_config({key: raw})[key])
    args: list[str] = []
    _env(monkeypatch, ref, {key: raw} if place == "application" else {})
    if place == "config-file":
        (tmp_path / "job.properties").write_text(f"# given in a file\n{key}={raw}\n")
        args = ["--config-file", "job.properties"]
    elif place == "-c":
        args = ["-c", f"{key}={raw}"]
    shown = _shown(capsys, args)
    source = {"config-file": "--config-file job.properties"}.get(place, place)
    assert shown.get(key) == (want, source), shown.get(key)


@pytest.mark.parametrize("ref", sorted(VALUES))
def test_each_key_given_to_a_runner_is_the_jobs(ref: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner's ``config=`` and the application's own build one job config."""
    monkeypatch.chdir(tmp_path)
    key, raw = VALUES[ref]
    want = validate_config({key: raw})[key]
    companions: dict[str, str] = {}
    if ref in SECURITY:  # the other security keys, and their files
        from samza_dsl.testing.secured_kafka import make_certificates

        made = make_certificates(tmp_path / "certs")
        (tmp_path / "ca.pem").write_text(made["ca"].read_text())
        (tmp_path / "client.pem").write_text((tmp_path / "certs" / "broker-cert.pem").read_text())
        (tmp_path / "client-key.pem").write_text((tmp_path / "certs" / "broker-pk8.pem").read_text())
        (tmp_path / "key-password").write_text("unused: the key is not encrypted\n")
        monkeypatch.setenv("PLACES_PASSWORD", "places-secret")
        companions = {VALUES[r][0]: VALUES[r][1] for r in SECURITY if r != ref}
    for given, own in (({key: raw}, {}), ({}, {key: raw})):
        given, own = {**companions, **given}, {**companions, **own}
        _env(monkeypatch, ref, own)
        app = load_app(APP)
        if ref in KAFKA_ONLY:
            job: Any = KafkaJob(app, job_config(app, given))
            assert job.config[key] == want
            if ref == "systems.<name>.bootstrap.servers":
                assert job.servers == raw
            if ref.endswith(".consumer.*"):
                assert str(job.consumer_settings["fetch_max_wait_ms"]) == raw
            if ref.endswith(".producer.*"):
                assert str(job.producer_settings["linger_ms"]) == raw
            if ref in SECURITY:  # every client logs in the same way
                for settings in (job.login, job.consumer_settings, job.producer_settings):
                    assert settings["security_protocol"] == "SASL_SSL"
                    assert settings["sasl_plain_password"] == "places-secret"
                    assert settings["ssl_context"].check_hostname is False
                assert job.login["sasl_mechanism"] == "SCRAM-SHA-256"
            continue
        runner = LocalRunner(app, given)
        job = LocalJob(runner.app, runner.config, run=False)
        try:
            assert job.config[key] == want and job.plan.config[key] == want
        finally:
            job.close()


def _run(*args: str, cwd: Path, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SAMZA_PLACES_SYSTEM": "local", **(env or {})})


WHERE = {"job.dir": "state", "systems.local.path": "the-log", "job.name": "renamed",
         "job.id": "7", "streams.events.samza.physical.name": "events-v2",
         "stores.counts.changelog": "counts-log"}


@pytest.mark.parametrize("place", PLACES)
def test_where_state_and_streams_go_is_honoured_from_each_place(place: str, tmp_path: Path
                                                                ) -> None:
    """load, run, dump and status of one job: its job.dir, log, name and streams are where the
    keys say, given in the application, in a config file or with -c."""
    lines = tmp_path / "e.jsonl"
    lines.write_text("".join(json.dumps({"key": str(i % 3), "value": {"n": i}}) + "\n"
                             for i in range(9)))
    env: dict[str, str] = {}
    flags: list[str] = []
    if place == "application":
        env["SAMZA_PLACES_CONFIG"] = json.dumps(WHERE)
    elif place == "config-file":
        (tmp_path / "job.properties").write_text("".join(f"{k}={v}\n" for k, v in WHERE.items()))
        flags = ["--config-file", "job.properties"]
    else:
        flags = [x for k, v in WHERE.items() for x in ("-c", f"{k}={v}")]
    for step in (["load", APP, "events", str(lines)], ["run", APP, "-q"],
                 ["status", APP, "--json"]):
        done = _run(*step, *flags, cwd=tmp_path, env=env)
        assert done.returncode == 0, (step, done.stderr)
    assert json.loads(done.stdout)["job"] == "renamed-7"
    assert not (tmp_path / ".samza").exists(), "nothing lands in the default job.dir"
    assert (tmp_path / "state").is_dir()
    with LocalLog(tmp_path / "the-log") as log:
        streams = log.streams()
    assert streams.get("events-v2") == 2 and "events" not in streams, streams
    assert "counts-log" in streams and not [s for s in streams if "places-1" in s], streams
    dumped = _run("dump", APP, "totals", *flags, cwd=tmp_path, env=env)
    assert dumped.returncode == 0, dumped.stderr
    finals = {}
    for line in dumped.stdout.splitlines():
        entry = json.loads(line)
        finals[entry["key"]] = entry["value"]
    assert finals == {"0": 3, "1": 3, "2": 3}


def test_the_runner_honours_where_state_goes_from_its_config(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SAMZA_PLACES_SYSTEM", "local")
    monkeypatch.delenv("SAMZA_PLACES_CONFIG", raising=False)
    from samza_dsl import KV
    runner = LocalRunner(load_app(APP), {**WHERE, "job.dir": str(tmp_path / "state")},
                         inputs={"events": [KV(str(i % 3), {"n": i}) for i in range(9)]})
    try:
        runner.run()
        assert sorted(kv.value for kv in runner.messages("totals"))[-3:] == [3, 3, 3]
    finally:
        runner.close()
    assert not (tmp_path / ".samza").exists() and (tmp_path / "state").is_dir()
    with LocalLog(tmp_path / "the-log") as log:
        assert {"events-v2", "counts-log"} <= set(log.streams())


def test_a_bad_value_names_the_key_from_every_place(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.properties").write_text("task.max.concurrency=many\n")
    done = _run("run", APP, "--config-file", "job.properties", cwd=tmp_path)
    assert done.returncode != 0 and "task.max.concurrency='many'" in done.stderr, done.stderr
    (tmp_path / "bad.properties").write_text("just words\n")
    done = _run("run", APP, "--config-file", "bad.properties", cwd=tmp_path)
    assert done.returncode != 0 and "bad.properties:1" in done.stderr, done.stderr
    monkeypatch.setenv("SAMZA_PLACES_CONFIG", json.dumps({"task.max.concurency": 2}))
    with pytest.raises(ConfigError, match="did you mean 'task.max.concurrency'"):
        load_app(APP)


def test_job_coordinator_kafka_on_the_embedded_system_is_refused(tmp_path: Path) -> None:
    done = _run("run", APP, "-c", "job.coordinator=kafka", cwd=tmp_path)
    assert done.returncode != 0
    assert "job.coordinator=kafka" in done.stderr and "embedded" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
