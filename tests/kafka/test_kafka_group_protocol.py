"""A session timeout the broker refuses is a config error in one line that names the broker's
bounds and the key to set (docs/several-machines.md, "Which group protocol").

Apache Kafka refuses a session below ``group.min.session.timeout.ms`` (1 s in the test bed);
tansu has no such bound, and the member runs."""

from __future__ import annotations

import uuid
from pathlib import Path

from group_helpers import Member, settled, wait_for
from kafka_helpers import create_topic, run


def test_a_session_timeout_the_broker_refuses_names_the_bounds(
        kafka_bootstrap: str, kafka_broker_kind: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    member = Member(tmp_path / "host", kafka_bootstrap, tag,
                    "-c", "systems.kafka.consumer.session.timeout.ms=500",
                    "-c", "systems.kafka.consumer.heartbeat.interval.ms=100")
    try:
        if kafka_broker_kind == "tansu":  # no bound: it joins and runs
            wait_for("the member runs the tasks", lambda: settled([member], 4), 60, [member])
            return
        code = member.proc.wait(60)
        text = member.text()
        assert code != 0
        lines = [line for line in text.splitlines() if "session timeout" in line]
        assert len(lines) == 1, text[-3000:]
        assert "group.min.session.timeout.ms" in lines[0]
        assert "systems.<system>.consumer.session.timeout.ms" in lines[0]
        assert "Traceback" not in text
    finally:
        member.stop()
