"""A secured cluster: Apache Kafka whose clients' listener speaks SASL_SSL (TLS with a CA and
certificates the test makes, SCRAM-SHA-512 users created through the admin API). A job reaches
it with ``systems.kafka.security.protocol`` and the SASL and SSL keys, which every client takes
(the admin client, consumers, producers, the transactional producers, the group member, the
brokers' watch, load, dump and status); its password comes from an environment variable or a
file and is written nowhere: not in any output, not in ``samza-dsl config`` or the plan, not on
the job page, not in the metrics or any file of the job's.

A wrong password, or a CA that did not sign the broker's certificate, is one line naming the
broker and what failed. On a broker that checks ACLs, a user that logs in and may not use a
topic, the job's consumer group or its transactional ids stops the job at once, in one line
naming the user and what to grant.

Apache Kafka only: tansu has no TLS and no SASL listener.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from group_helpers import Member, wait_for
from test_deploy import SECRET_MOUNT, login_args
from test_deploy import _args as pod_args
from test_deploy import _pod as pod

from runtime.kafka.admin import TopicSpec, describe_topics, ensure_topics
from runtime.kafka.system import new_consumer, stop_client
from samza_dsl.testing.secured_kafka import SecuredKafkaBroker

APPS = Path(__file__).parent / "kafka_apps.py"
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
USER = "orders-app"
PASSWORD = "pw-" + secrets.token_urlsafe(12)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafkaBroker]:
    with SecuredKafkaBroker(root=tmp_path_factory.mktemp("secured-kafka")) as broker:
        broker.add_user(USER, PASSWORD)
        yield broker


def _properties(folder: Path, broker: SecuredKafkaBroker, password: str, *,
                ca: Path | None = None) -> Path:
    """A --config-file that logs in as USER, the password given as ``password`` (env:, file:)."""
    path = folder / f"secured-{uuid.uuid4().hex[:6]}.properties"
    path.write_text("systems.kafka.security.protocol=SASL_SSL\n"
                    "systems.kafka.sasl.mechanism=SCRAM-SHA-512\n"
                    f"systems.kafka.sasl.username={USER}\n"
                    f"systems.kafka.sasl.password={password}\n"
                    f"systems.kafka.ssl.cafile={ca or broker.ca_file}\n")
    return path


def _cli(*args: str, cwd: Path, env: dict[str, str], tag: str, bootstrap: str,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **env, "SAMZA_TEST_TAG": tag,
                                                "SAMZA_TEST_BOOTSTRAP": bootstrap})


def _no_secret(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text, text[-2000:]


def _files_hold_no_secret(folder: Path) -> None:
    """No file the job wrote (stores, metrics, locks, logs) holds the password."""
    for path in folder.rglob("*"):
        if path.is_file() and not path.name.endswith(".properties") \
                and path.name != "password":
            assert PASSWORD.encode() not in path.read_bytes(), path


async def _read(broker: SecuredKafkaBroker, topic: str, partitions: int) -> list[Any]:
    """Every committed record of ``topic``, read as the admin over SASL_SSL."""
    settings = {**broker.client_settings(), "isolation_level": "read_committed"}
    if not (await describe_topics(broker.bootstrap, [topic], **broker.client_settings()))[topic]:
        return []  # not created yet
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = new_consumer(broker.bootstrap, settings, brief=True)
    out: list[Any] = []
    await consumer.start()
    try:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        while batch := await consumer.getmany(timeout_ms=1000):
            for records in batch.values():
                out += [json.loads(r.value) for r in records if r.value is not None]
    finally:
        await stop_client(consumer)
    return out


def test_a_job_logs_in_with_the_password_from_an_env_var_and_shows_it_nowhere(
        secured: SecuredKafkaBroker, tmp_path: Path) -> None:
    """load, run (at least once, static), dump, status and config of one job, over SASL_SSL."""
    tag = uuid.uuid4().hex[:8]
    props = _properties(tmp_path, secured, "env:ORDERS_KAFKA_PASSWORD")
    env = {"ORDERS_KAFKA_PASSWORD": PASSWORD}
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({"key": f"u{i % 5}", "value": {"user": f"u{i % 5}"}})
                              + "\n" for i in range(60)))
    common = ("--config-file", str(props), "-c", f"job.dir={tmp_path / 'job'}")
    app = f"{APPS}:count"
    steps = [["load", app, "events", str(events), *common],
             ["run", app, "-q", *common, "-c", "metrics.reporters=json"],
             ["dump", app, "out", *common],
             ["status", app, "--json", *common],
             ["config", "--app", app, *common]]
    done = {}
    for step in steps:
        done[step[0]] = got = _cli(*step, cwd=tmp_path, env=env, tag=tag,
                                   bootstrap=secured.bootstrap)
        assert got.returncode == 0, (step[0], got.stderr[-3000:])
        _no_secret(got.stdout, got.stderr)
    finals: dict[str, int] = {}
    for line in done["dump"].stdout.splitlines():
        entry = json.loads(line)
        finals[entry["key"]] = max(finals.get(entry["key"], 0), entry["value"])
    assert finals == {f"u{k}": 12 for k in range(5)}
    assert json.loads(done["status"].stdout)["job"].startswith("gcount-")
    shown = {line.split()[0]: line for line in done["config"].stdout.splitlines()}
    assert "'env:ORDERS_KAFKA_PASSWORD'" in shown["systems.kafka.sasl.password"]
    _files_hold_no_secret(tmp_path)
    # a password given as it is (here with -c) is shown as *** by config and the plan
    for step in (["config", "--app", app, *common, "-c",
                  f"systems.kafka.sasl.password={PASSWORD}"],
                 ["plan", app, "--format", "json", "-c",
                  f"systems.kafka.sasl.password={PASSWORD}"]):
        got = _cli(*step, cwd=tmp_path, env=env, tag=tag, bootstrap=secured.bootstrap)
        assert got.returncode == 0, got.stderr
        assert "***" in got.stdout
        _no_secret(got.stdout, got.stderr)


def test_a_consumer_group_runs_exactly_once_with_the_password_from_a_file(
        secured: SecuredKafkaBroker, tmp_path: Path) -> None:
    """A member of the job's consumer group (--follow), exactly once, with the job page up:
    transactions, the group protocol and the page over SASL_SSL, the password read from a
    mounted file, shown nowhere."""
    tag = uuid.uuid4().hex[:8]
    secret = tmp_path / "secret" / "password"
    secret.parent.mkdir()
    secret.write_text(PASSWORD + "\n")  # as a Secret's file may end
    props = _properties(tmp_path, secured, f"file:{secret}")
    page = _free_port()
    member = Member(tmp_path / "host", secured.bootstrap, tag, "--config-file", str(props),
                    "-c", "job.processing.guarantee=exactly-once", "-c",
                    "metrics.reporters=json", "--ui", f"127.0.0.1:{page}")
    n = 200
    try:
        asyncio.run(ensure_topics(secured.bootstrap, [TopicSpec(f"gevents-{tag}", 4)],
                                  **secured.client_settings(USER, PASSWORD)))
        asyncio.run(_produce(secured, f"gevents-{tag}", n))

        def counted() -> bool:
            outs = asyncio.run(_read(secured, f"gout-{tag}", 2))
            return Counter(o[2] for o in outs) == Counter(range(n)) if outs else False
        wait_for("every event is counted once", counted, 90, [member])
        for path in ("/api/state", "/plan.svg", "/"):
            with urllib.request.urlopen(f"http://127.0.0.1:{page}{path}", timeout=10) as r:
                _no_secret(r.read().decode(errors="replace"))
    finally:
        code = member.stop()
    assert code == 0, member.text()[-3000:]
    _no_secret(member.text())
    _files_hold_no_secret(tmp_path)


async def _produce(broker: SecuredKafkaBroker, topic: str, n: int, partitions: int = 4
                   ) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                **broker.client_settings(USER, PASSWORD))
    await producer.start()
    try:
        for i in range(n):
            await producer.send(topic, json.dumps({"i": i}).encode(),
                                key=f"k{i % 10}".encode(), partition=i % partitions)
        await producer.flush()
    finally:
        await producer.stop()


def _free_port() -> int:
    from kafka_helpers import free_port
    return free_port()


@pytest.mark.parametrize("wrong", ["password", "ca"])
def test_a_refused_login_is_one_line_naming_the_broker(
        wrong: str, secured: SecuredKafkaBroker, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    bad = "not-" + PASSWORD
    props = _properties(tmp_path, secured, "env:ORDERS_KAFKA_PASSWORD",
                        ca=secured.other_ca_file if wrong == "ca" else None)
    env = {"ORDERS_KAFKA_PASSWORD": bad if wrong == "password" else PASSWORD}
    started = time.monotonic()
    got = _cli("run", f"{APPS}:count", "-q", "--config-file", str(props), "-c",
               f"job.dir={tmp_path / 'job'}", cwd=tmp_path, env=env, tag=tag,
               bootstrap=secured.bootstrap)
    assert got.returncode != 0
    assert time.monotonic() - started < 30, "a refusal is not waited on as an outage"
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in got.stderr, got.stderr
    assert secured.bootstrap in lines[0], lines[0]
    if wrong == "password":
        assert "SASL authentication" in lines[0] and USER in lines[0], lines[0]
        assert "env ORDERS_KAFKA_PASSWORD" in lines[0], lines[0]
        assert bad not in got.stdout + got.stderr
    else:
        assert "not trusted" in lines[0] and str(secured.other_ca_file) in lines[0], lines[0]
    _no_secret(got.stdout, got.stderr)


def test_a_job_without_security_settings_is_told_the_listener_wants_them(
        secured: SecuredKafkaBroker, tmp_path: Path) -> None:
    got = _cli("run", f"{APPS}:count", "-q", "-c", f"job.dir={tmp_path / 'job'}",
               cwd=tmp_path, env={}, tag="plain", bootstrap=secured.bootstrap)
    assert got.returncode != 0
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and secured.bootstrap in lines[0], got.stderr
    assert "systems.kafka.security.protocol" in lines[0] or "security_protocol" in lines[0]


def test_a_tls_client_at_a_plaintext_listener_is_one_line(
        secured: SecuredKafkaBroker, tmp_path: Path) -> None:
    props = _properties(tmp_path, secured, "env:ORDERS_KAFKA_PASSWORD")
    got = _cli("run", f"{APPS}:count", "-q", "--config-file", str(props), "-c",
               f"job.dir={tmp_path / 'job'}", cwd=tmp_path,
               env={"ORDERS_KAFKA_PASSWORD": PASSWORD}, tag="tls-at-plain",
               bootstrap=secured.plaintext_bootstrap)
    assert got.returncode != 0
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and secured.plaintext_bootstrap in lines[0], got.stderr
    assert "TLS handshake" in lines[0] and "systems.kafka.security.protocol" in lines[0]
    _no_secret(got.stdout, got.stderr)


def _doubled_app(bootstrap: str, tag: str) -> Any:
    from samza_dsl import KV, StreamApplication
    from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
    from samza_dsl.systems import KafkaSystem

    serde = KVSerde(StringSerde(), JsonSerde())
    app = StreamApplication(f"spark-secured-{tag}")
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    (app.input(kafka.input("events", serde=serde, physical_name=f"sevents-{tag}"))
     .map(lambda kv: KV(kv.key, {"i": kv.value["i"] * 2}), name="double")
     .send_to(app.output(kafka.output("out", serde=serde, physical_name=f"sout-{tag}"))))
    return app


def test_spark_reprocesses_from_and_to_the_secured_cluster(
        secured: SecuredKafkaBroker, spark: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Kafka range read in the executors and an output topic written (then replaced by a
    rerun) with the login of the run's config, the password from an environment variable."""
    from runtime.spark import KafkaOutput, KafkaRange, SparkRunner

    tag = uuid.uuid4().hex[:8]
    monkeypatch.setenv("ORDERS_KAFKA_PASSWORD", PASSWORD)
    login = {"security.protocol": "SASL_SSL", "sasl.username": USER,
             "sasl.password": "env:ORDERS_KAFKA_PASSWORD", "ssl.cafile": str(secured.ca_file)}
    config = {f"systems.kafka.{k}": v for k, v in login.items()}
    asyncio.run(ensure_topics(secured.bootstrap, [TopicSpec(f"sevents-{tag}", 2)],
                              **secured.client_settings(USER, PASSWORD)))
    asyncio.run(_produce(secured, f"sevents-{tag}", 40, partitions=2))
    for _ in range(2):  # the rerun deletes and creates the output topic again, logged in
        result = SparkRunner(spark).reprocess(
            _doubled_app(secured.bootstrap, tag), {"events": KafkaRange(secured.bootstrap)},
            outputs={"out": KafkaOutput(secured.bootstrap)}, config=config)
        assert result.rows_in == {"events": 40}
        got = asyncio.run(_read(secured, f"sout-{tag}", 2))
        assert sorted(v["i"] for v in got) == [2 * i for i in range(40)]
    # a range may carry its own login: a wrong password is refused in one line
    monkeypatch.setenv("ORDERS_KAFKA_PASSWORD", "not-it")
    with pytest.raises(Exception, match="SASL authentication .* failed for user") as refused:
        SparkRunner(spark).reprocess(
            _doubled_app(secured.bootstrap, tag),
            {"events": KafkaRange(secured.bootstrap, security=login)})
    assert PASSWORD not in str(refused.value)


def test_the_kubernetes_pods_login_from_its_secret_logs_in(
        secured: SecuredKafkaBroker, tmp_path: Path) -> None:
    """deploy/kubernetes: the pod's login arguments, with its Secret's files in a folder as the
    kubelet mounts them and its user as the Secret's environment variable, log a job in."""
    (job,) = pod()["spec"]["template"]["spec"]["containers"]
    _, login = login_args(pod_args(job))
    mounted = tmp_path / "secret"
    mounted.mkdir()
    (mounted / "password").write_text(PASSWORD)
    (mounted / "ca.crt").write_text(secured.ca_file.read_text())
    login = [a.replace(SECRET_MOUNT, str(mounted)) for a in login]
    tag = uuid.uuid4().hex[:8]
    asyncio.run(ensure_topics(secured.bootstrap, [TopicSpec(f"gwevents-{tag}", 4)],
                              **secured.client_settings()))
    # the kubelet expands $(KAFKA_USERNAME) from the Secret; a shell-less exec here does too
    login = [a.replace("$(KAFKA_USERNAME)", USER) for a in login]
    got = _cli("run", f"{APPS}:count", "-q", *login, "-c", f"job.dir={tmp_path / 'job'}",
               cwd=tmp_path, env={}, tag=tag, bootstrap=secured.bootstrap)
    assert got.returncode == 0, got.stderr[-3000:]
    _no_secret(got.stdout, got.stderr)


@pytest.fixture(scope="module")
def authorized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafkaBroker]:
    """A secured broker that checks ACLs: a user may do only what it was granted."""
    with SecuredKafkaBroker(root=tmp_path_factory.mktemp("authorized-kafka"),
                            authorizer=True) as broker:
        yield broker


#: what each user of ``test_a_refused_authorization_...`` is granted, and the job's config
_GRANTS: dict[str, tuple[list[tuple[str, str, str]], tuple[str, ...]]] = {
    "no-group": ([("topic", "*", "all"), ("cluster", "kafka-cluster", "all")],
                 ("--follow", "-c", "job.coordinator=kafka")),
    "describe-only": ([("topic", "*", "describe")], ()),
    "no-txn": ([("topic", "*", "all"), ("cluster", "kafka-cluster", "all")],
               ("-c", "job.processing.guarantee=exactly-once")),
    "nothing": ([], ()),
}


@pytest.mark.parametrize("case", list(_GRANTS))
def test_a_refused_authorization_stops_the_job_at_once_in_one_line(
        case: str, authorized: SecuredKafkaBroker, tmp_path: Path) -> None:
    """A user that logs in and may not use a topic, the job's consumer group or its
    transactional ids: the job stops within seconds with one line naming the user and what to
    grant; a refusal is not waited on as a broker that is away."""
    tag = uuid.uuid4().hex[:8]
    user = f"{case}-{tag}"
    grants, args = _GRANTS[case]
    authorized.add_user(user, PASSWORD)
    if grants:
        authorized.allow(user, grants)
    asyncio.run(ensure_topics(authorized.bootstrap, [TopicSpec(f"gwevents-{tag}", 4)],
                              **authorized.client_settings()))
    props = tmp_path / "login.properties"
    props.write_text("systems.kafka.security.protocol=SASL_SSL\n"
                     "systems.kafka.sasl.mechanism=SCRAM-SHA-512\n"
                     f"systems.kafka.sasl.username={user}\n"
                     "systems.kafka.sasl.password=env:ORDERS_KAFKA_PASSWORD\n"
                     f"systems.kafka.ssl.cafile={authorized.ca_file}\n")
    started = time.monotonic()
    got = _cli("run", f"{APPS}:count", "-q", *args, "--config-file", str(props), "-c",
               f"job.dir={tmp_path / 'job'}", cwd=tmp_path,
               env={"ORDERS_KAFKA_PASSWORD": PASSWORD}, tag=tag,
               bootstrap=authorized.bootstrap, timeout=60)
    took = time.monotonic() - started
    at = f"on Kafka at {authorized.bootstrap} was refused: user {user!r} is not authorized for"
    tail = (f"the brokers accepted the login, so its password is not at fault: grant user "
            f"{user!r}")
    first = f"gwout-{tag}"  # the first topic the job makes
    expected = {
        "no-group": f"taking part in consumer group 'gcount-{tag}-1' {at} consumer group "
                    f"'gcount-{tag}-1' (GroupAuthorizationFailedError); {tail} Read and "
                    f"Describe on it (an ACL), and run again (a refusal is not retried)",
        "describe-only": f"creating topic {first!r} {at} topic {first!r} "
                         f"(TopicAuthorizationFailedError); {tail} Describe, Read and Write on "
                         f"it (and Create where the job makes its topics) (an ACL), and run "
                         f"again (a refusal is not retried)",
        "no-txn": f"starting the transactional producer 'gcount-{tag}-1-Partition 0' {at} "
                  f"transactional id 'gcount-{tag}-1-Partition 0' "
                  f"(TransactionalIdAuthorizationFailed); {tail} Write and Describe on it (on "
                  f"the job's prefix, for every task) (an ACL), and run again (a refusal is not "
                  f"retried)",
        "nothing": f"input 'events': topic 'gwevents-{tag}' does not exist on the Kafka "
                   f"brokers at {authorized.bootstrap} (or user {user!r} may not Describe it); "
                   f"create it, or check the stream's physical_name, or grant user {user!r} "
                   f"Describe and Read on it (an ACL)",
    }[case]
    assert got.returncode == 2, got.stderr
    # the tasks' producers start together and the first refused names its own task's id
    shown = re.sub(r"-1-Partition \d+'", "-1-Partition 0'", got.stderr) if case == "no-txn" \
        else got.stderr
    assert shown == f"samza-dsl run: error: {expected}\n", got.stderr
    assert took < 20, f"a refusal is not waited on as an outage ({took:.1f} s)"
    _no_secret(got.stdout, got.stderr)
