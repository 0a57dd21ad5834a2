"""``./dev broker`` (``python -m samza_dsl.testing.apache_kafka``): one command starts a broker on
127.0.0.1 for a user to try a job against, says where it is, and stops on Ctrl-C."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from samza_dsl.testing.apache_kafka import KAFKA_VERSION


async def round_trip(bootstrap: str) -> bytes:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await (await producer.send("tried", b"hello", partition=0))
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer("tried", bootstrap_servers=bootstrap,
                                auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 30)
        return bytes(record.value or b"")
    finally:
        await consumer.stop()


@pytest.mark.parametrize("flags, what", [([], f"Apache Kafka {KAFKA_VERSION}"),
                                         (["--tansu"], "tansu")])
def test_one_command_starts_a_broker_that_says_where_it_is(flags: list[str], what: str) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "samza_dsl.testing.apache_kafka", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(what), line
        found = re.search(r"bootstrap_servers='(127\.0\.0\.1:\d+)'", line)
        assert found, line
        assert asyncio.run(round_trip(found.group(1))) == b"hello"
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
    assert code == 0
