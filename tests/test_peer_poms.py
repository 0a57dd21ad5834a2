"""The Maven builds the project keeps (Apache Kafka's broker for the tests, Kafka Streams as a
benchmark peer) pin Apache Kafka at the version the tests' broker is, and every plugin's
version, so that a build is the same on every machine."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from samza_dsl.testing.apache_kafka import KAFKA_VERSION

ROOT = Path(__file__).resolve().parent.parent
POMS = [ROOT / ".ci" / "apache-kafka" / "pom.xml",
        ROOT / "benchmarks" / "peers" / "kafka-streams" / "pom.xml"]
NS = {"m": "http://maven.apache.org/POM/4.0.0"}


@pytest.mark.parametrize("pom", POMS, ids=lambda p: str(p.relative_to(ROOT)))
def test_pom_pins_kafka_and_every_plugin(pom: Path) -> None:
    project = ET.parse(pom).getroot()
    assert project.findtext("m:properties/m:kafka.version", namespaces=NS) == KAFKA_VERSION
    plugins = project.findall("m:build/m:plugins/m:plugin", NS)
    assert plugins
    for plugin in plugins:
        name = plugin.findtext("m:artifactId", namespaces=NS)
        assert plugin.findtext("m:version", namespaces=NS), f"{pom.name}: {name} is not pinned"
