"""A Kafka job's settings come from one place (``runtime.kafka.settings``), made from the typed
``JobConfig`` it is handed: the config's ``systems.<name>.*`` over the descriptor's, the job's name
from ``job.name``/``job.id`` or the application's, and no job rebuilds a config it is given."""

from __future__ import annotations

import pytest

from runtime.kafka.job import KafkaJob
from runtime.kafka.settings import kafka_settings
from samza_dsl import StreamApplication
from samza_dsl.errors import ConfigError
from samza_dsl.jobconfig import job_config
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem


def _app() -> StreamApplication:
    kafka = KafkaSystem("kafka", bootstrap_servers="127.0.0.1:1",
                        consumer={"fetch_max_wait_ms": 50, "max_poll_records": 7},
                        producer={"linger_ms": 3}, **{"security.protocol": "SASL_PLAINTEXT",
                                                      "sasl.username": "app",
                                                      "sasl.password": "env:SETTINGS_PW"})
    app = StreamApplication("settings", app_id="2", config={"task.commit.ms": 5})
    serde = KVSerde(StringSerde(), JsonSerde())
    app.input(kafka.input("in", serde=serde, partitions=1)).send_to(
        app.output(kafka.output("out", serde=serde, partitions=1)))
    return app


def test_the_config_s_system_keys_go_over_the_descriptor_s(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: object) -> None:
    monkeypatch.setenv("SETTINGS_PW", "settings-secret")
    app = _app()
    config = job_config(app, {"systems.kafka.bootstrap.servers": "127.0.0.1:2",
                              "systems.kafka.consumer.max.poll.records": "9",
                              "systems.kafka.sasl.mechanism": "PLAIN",
                              "job.processing.guarantee": "exactly-once",
                              "job.kafka.unavailable.timeout.ms": 60000,
                              "job.dir": str(tmp_path)})
    assert config.job.job_name == "settings-2"
    settings = kafka_settings(config.systems["kafka"], app.spec().inputs["in"].system.config,
                              config, follow=False)
    assert settings.servers == "127.0.0.1:2"
    assert settings.consumer["fetch_max_wait_ms"] == 50  # the descriptor's
    assert settings.consumer["max_poll_records"] == 9  # the config's, over it
    assert settings.consumer["isolation_level"] == "read_committed"
    assert settings.producer["linger_ms"] == 3 and settings.producer["acks"] == "all"
    assert settings.producer["request_timeout_ms"] == 70_000
    for client in (settings.login, settings.consumer, settings.producer):
        assert client["sasl_mechanism"] == "PLAIN"
        assert client["sasl_plain_password"] == "settings-secret"
    assert settings.coordinator == "static" and settings.producer_timeout == 90.0
    assert "settings-secret" not in repr(settings)
    job = KafkaJob(app, config)
    assert job.config is config and job.job_name == "settings-2"
    assert job.servers == "127.0.0.1:2" and job.root == str(tmp_path)
    assert job.lock.job_name == "settings-2"
    job.lock.release()


def test_a_job_s_name_and_id_from_the_config_name_it(tmp_path: object) -> None:
    app = _app()
    config = job_config(app, {"job.name": "eu", "job.id": "3", "job.dir": str(tmp_path)})
    assert config.job.job_name == "eu-3"
    assert job_config(app, config) is config
    with pytest.raises(ConfigError, match=r"config job.name='a b': a job's name and id are made"):
        _ = job_config(app, {"job.name": "a b"}).job.job_name
