"""The brokers the Kafka benchmarks (W7, W7X, W8K, W11) run on, each started fresh on 127.0.0.1
for a run: ``tansu`` (in memory, ``samza_dsl.testing.kafka_broker``) and ``apache-kafka`` (one
Apache Kafka node in KRaft mode, its log dirs in a temporary folder, from the jars ``./dev setup``
fetched: ``samza_dsl.testing.apache_kafka``).

``python benchmarks/run.py W7 --broker both`` runs each workload on both, alternating run by run,
and prints one summary per broker; each line's ``params.system`` names its broker.
"""

from __future__ import annotations

from typing import Protocol

from samza_dsl.testing.apache_kafka import KAFKA_VERSION, ApacheKafkaBroker
from samza_dsl.testing.kafka_broker import TansuBroker

__all__ = ["BROKERS", "Broker", "kinds", "pid_of", "start_broker", "system_of"]

#: the broker kinds, in the order ``both`` runs them
BROKERS = ("apache-kafka", "tansu")


class Broker(Protocol):
    @property
    def bootstrap(self) -> str: ...

    def stop(self) -> None: ...


def kinds(choice: str) -> tuple[str, ...]:
    """The kinds ``--broker`` names: one of ``BROKERS``, or ``both``."""
    if choice == "both":
        return BROKERS
    if choice not in BROKERS:
        raise ValueError(f"unknown broker {choice!r}: expected one of {', '.join(BROKERS)} "
                         f"or both")
    return (choice,)


def start_broker(kind: str) -> Broker:
    """A fresh broker of ``kind``, started and answering."""
    if kind == "tansu":
        return TansuBroker().start()
    if kind == "apache-kafka":
        # the JVM's full JIT, as a production broker runs (the tests' quick start stops at
        # its first tier, which saves CPU at the start and costs it under load)
        return ApacheKafkaBroker(jvm_options=[]).start()
    raise ValueError(f"unknown broker {kind!r}: expected one of {', '.join(BROKERS)}")


def system_of(kind: str) -> str:
    """The ``system`` a line names for a run on ``kind``."""
    return f"kafka (Apache Kafka {KAFKA_VERSION})" if kind == "apache-kafka" else "kafka (tansu)"


def pid_of(broker: Broker) -> int:
    """The process id of a running one-node ``broker`` (for its CPU seconds)."""
    if isinstance(broker, TansuBroker):
        proc = broker.proc
    else:
        assert isinstance(broker, ApacheKafkaBroker)
        proc = broker.nodes[0].proc
    if proc is None:
        raise RuntimeError("the broker is not running")
    return proc.pid
