"""Partitions added to a running job's input (docs/kafka.md, "Partitions added to a topic"): a
``samza-dsl run --follow`` of a count per key on a 4-partition topic, which is raised to 8,
stops within ``job.kafka.partition.check.ms`` with one line naming the stream, both counts and
what to do, exit code 2, after committing what it processed; a static container and a member
of the job's consumer group alike, and a static container exactly once (its last transaction
commits). Before, it went on reading partitions 0 to 3 only, and the records of partitions 4
to 7 were never read, silently.

Apache Kafka only: tansu cannot add partitions to a topic (it does not offer the
CreatePartitions request)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from group_helpers import APPS, CLI, Member, outputs, wait_for
from kafka_helpers import create_topic, keyed, produce_batched, run

from runtime.kafka.admin import describe_topics

CHECK_MS = 500
#: the stop comes within the check's interval; the rest is the stop itself on a busy machine
MARGIN_S = 20.0


async def _add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        await admin.create_partitions({topic: NewPartitions(total_count=total)})
    finally:
        await admin.close()
    deadline = time.monotonic() + 15
    while (await describe_topics(bootstrap, [topic]))[topic] != total:
        assert time.monotonic() < deadline, f"{topic!r} did not reach {total} partitions"
        await asyncio.sleep(0.05)


def _events(bootstrap: str, tag: str, first: int, n: int, partitions: int) -> None:
    """Events ``{"i": i}`` keyed ``k<i % 20>``, each in its key's partition of ``partitions``."""
    records = keyed(((f"k{i % 20}", {"i": i}) for i in range(first, first + n)), partitions)
    run(produce_batched(bootstrap, f"gevents-{tag}", records))


@pytest.mark.parametrize(("coordinator", "guarantee"), [
    ("static", "at-least-once"), ("kafka", "at-least-once"), ("static", "exactly-once")])
def test_partitions_added_to_an_input_stop_the_job_naming_both_counts(
        kafka_bootstrap: str, kafka_broker_kind: str, tmp_path: Path, coordinator: str,
        guarantee: str) -> None:
    if kafka_broker_kind == "tansu":
        pytest.skip("tansu cannot add partitions to a topic (no CreatePartitions request)")
    tag = uuid.uuid4().hex[:8]
    topic = f"gevents-{tag}"
    run(create_topic(kafka_bootstrap, topic, 4))
    _events(kafka_bootstrap, tag, 0, 40, 4)
    # no commit but the stop's: the checkpoints show that it covers what was processed
    member = Member(tmp_path / "host", kafka_bootstrap, tag,
                    "-c", f"job.coordinator={coordinator}",
                    "-c", f"job.processing.guarantee={guarantee}",
                    "-c", f"job.kafka.partition.check.ms={CHECK_MS}",
                    "-c", "task.commit.ms=600000")
    try:
        wait_for("the job counts", lambda: outputs(kafka_bootstrap, tag), 90, [member])
        run(_add_partitions(kafka_bootstrap, topic, 8))
        _events(kafka_bootstrap, tag, 40, 40, 8)
        try:
            code = member.proc.wait(CHECK_MS / 1000 + MARGIN_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the job did not stop after its input gained partitions:\n"
                                 f"{member.text()[-3000:]}") from None
    finally:
        if member.alive():
            member.signal(signal.SIGKILL)
            member.proc.wait(10)
    text = member.text()
    assert code == 2, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    (line,) = [ln for ln in text.splitlines() if "partitions now" in ln]
    assert line.startswith("samza-dsl run: error: job 'group-"), line
    assert (f"input stream 'events' (topic '{topic}') has 8 partitions now, not the 4 the job "
            f"was planned with: records in partitions 4 to 7 would never be read") in line, line
    assert "after committing what it had processed" in line, line
    assert "samza-dsl reset APP" in line and "docs/kafka.md" in line, line

    # the stop's commit: every event of the 4 partitions before the change was counted, and
    # each partition is checkpointed at the last event the job processed
    processed = _processed(kafka_bootstrap, tag)
    assert _committed(kafka_bootstrap, tag, tmp_path / "host") == \
        {p: n - 1 for p, n in processed.items()}, processed


def _processed(bootstrap: str, tag: str) -> dict[int, int]:
    """Per partition 0 to 3 of the input, how many of its events the job counted (each read
    in order from offset 0)."""
    seen: dict[int, int] = {}
    counted = {i for _, _, _, i in outputs(bootstrap, tag)}
    assert set(range(40)) <= counted, sorted(set(range(40)) - counted)
    for i in counted:
        ((p, _, _),) = keyed([(f"k{i % 20}", None)], 4 if i < 40 else 8)
        assert p < 4, f"event {i} of partition {p} was counted"
        seen[p] = seen.get(p, 0) + 1
    return seen


def _committed(bootstrap: str, tag: str, folder: Path) -> dict[int, int]:
    """The input offsets the job's checkpoints hold, per partition (``samza-dsl status``)."""
    env = {**os.environ, "SAMZA_TEST_BOOTSTRAP": bootstrap, "SAMZA_TEST_TAG": tag}
    done = subprocess.run([CLI, "status", f"{APPS}:group", "--json", "-c",
                           f"job.dir={folder / 'job'}"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["partitions"]
    return {r["partition"]: r["checkpointed_offset"] for r in rows if r["stream"] == "events"
            and r["checkpointed_offset"] is not None}
