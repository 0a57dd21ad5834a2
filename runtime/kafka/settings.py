"""A Kafka job's settings, made in one place from the typed ``JobConfig``: where its brokers are,
how every client logs in, its consumers' and producers' aiokafka keyword arguments, how its
containers share the tasks, and how long it waits out the brokers.

The system's ``systems.<name>.*`` keys in the job's config go over what its descriptor
(``KafkaSystem(...)``) gives, so one cluster's job can be pointed at another, or log in
otherwise, with no change to the application. A client setting may be written with dots as in
Samza and Kafka (``session.timeout.ms``) or as aiokafka names it (``session_timeout_ms``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.kafka.group import job_coordinator
from runtime.kafka.security import KafkaSecurity, kafka_security
from samza_dsl.jobconfig import JobConfig, SystemConfig

__all__ = ["KafkaSettings", "kafka_settings", "client_settings"]


@dataclass(frozen=True)
class KafkaSettings:
    """What a Kafka job's clients are given; ``repr`` shows no setting (a password is one)."""

    #: the brokers, ``host:port[,host:port...]``
    servers: str
    #: how the job's clients log in (``runtime.kafka.security``)
    security: KafkaSecurity
    #: the security keyword arguments every client takes
    login: dict[str, Any] = field(repr=False)
    #: the job's consumers' keyword arguments, login and isolation level included
    consumer: dict[str, Any] = field(repr=False)
    #: the job's producers' keyword arguments, login, acks and request timeout included
    producer: dict[str, Any] = field(repr=False)
    #: ``kafka`` or ``static``: how the job's containers share its tasks
    coordinator: str
    #: seconds the job retries while its brokers cannot be reached
    unavailable_s: float
    #: seconds a producer's flush may take, past an outage the job waits out
    producer_timeout: float


def _as_setting(value: Any) -> Any:
    """A client setting from the config (a string from ``-c``) as aiokafka takes it."""
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
    return value


def client_settings(given: Mapping[str, Any]) -> dict[str, Any]:
    """aiokafka keyword arguments of a system's ``consumer.*`` or ``producer.*`` settings."""
    return {k.replace(".", "_"): _as_setting(v) for k, v in given.items()}


def kafka_settings(system: SystemConfig, own: Mapping[str, Any], config: JobConfig, *,
                   follow: bool) -> KafkaSettings:
    """The settings of a job of ``config`` on Kafka system ``system``: its keys in the config
    over ``own``, those its descriptor gives; run with ``--follow`` or not."""
    security = kafka_security(system, own)
    login = security.settings()
    consumer = {**client_settings(_clients(own, "consumer.")), **client_settings(system.consumer),
                **login}
    producer = {**client_settings(_clients(own, "producer.")), **client_settings(system.producer),
                **login}
    # a write is acknowledged once every in-sync replica has it (min.insync.replicas of the
    # job's topics): a broker lost right after loses nothing
    producer.setdefault("acks", "all")
    if config.job.exactly_once:  # the job's own readers see committed transactions only
        consumer["isolation_level"] = "read_committed"
    unavailable = config.job.kafka_unavailable_timeout_ms / 1000.0
    # aiokafka retries a batch until its request timeout: not less than an outage may last
    producer.setdefault("request_timeout_ms", max(40_000, int(unavailable * 1000) + 10_000))
    return KafkaSettings(
        str(system.bootstrap_servers or own["bootstrap.servers"]), security, login, consumer,
        producer, job_coordinator(config.job, follow=follow, job_name=config.job.job_name),
        unavailable, max(30.0, unavailable + 30.0))


def _clients(own: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """A descriptor's client settings under ``prefix`` (``KafkaSystem(consumer={...})``)."""
    return {k[len(prefix):]: v for k, v in own.items() if k.startswith(prefix)}
