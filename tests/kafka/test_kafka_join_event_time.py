"""An event-time join (``join(..., within=)``) on Kafka, a static job: ride requests joined with
acceptances within 60 s over topics with up to 4 s of disorder (declared 5 s) give the
plain-Python answer, as on TestRunner and the embedded system; with more disorder than declared
the late messages are counted and every match of the messages that were not late comes out."""

from __future__ import annotations

import random
import sys
import uuid
from pathlib import Path
from typing import Any

from kafka_helpers import create_topic, keyed, produce_batched, produce_each, run

from runtime import LocalRunner
from samza_dsl.systems import KafkaSystem

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
from etjoin_app import BOUND_S, build, pairs, rides  # noqa: E402

JOIN = "rides-{tag}-1-join-accepted"


def _load(bootstrap: str, kind: str, tag: str, reqs: list[Any], accs: list[Any]
          ) -> dict[str, str]:
    topics = {s: f"{s}-{tag}" for s in ("requests", "accepts", "matches", "late")}
    produce = produce_batched if kind == "apache-kafka" else produce_each
    for sid, msgs in (("requests", reqs), ("accepts", accs)):
        run(create_topic(bootstrap, topics[sid], 2))
        run(produce(bootstrap, topics[sid], keyed(((kv.key, kv.value) for kv in msgs), 2)))
    for sid in ("matches", "late"):
        run(create_topic(bootstrap, topics[sid], 2))
    return topics


def test_requests_joined_with_acceptances_within_60s(
        kafka_bootstrap: str, kafka_broker_kind: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    reqs, accs = rides(random.Random(62), 800, disorder_s=4.0)
    topics = _load(kafka_bootstrap, kafka_broker_kind, tag, reqs, accs)
    app = build(KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap), how="left",
                name=f"rides-{tag}", topics=topics)
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()
    expected = pairs(reqs, accs, "left")
    assert len(expected) > 500
    assert sorted(runner.messages("matches"), key=repr) == expected
    assert runner.late_counts == {}


def test_disorder_past_the_bound_is_counted_late(
        kafka_bootstrap: str, kafka_broker_kind: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    reqs, accs = rides(random.Random(9), 800, disorder_s=BOUND_S * 3)
    topics = _load(kafka_bootstrap, kafka_broker_kind, tag, reqs, accs)
    app = build(KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap), how="inner",
                name=f"rides-{tag}", topics=topics, late_to="late")
    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")}).run()
    late = runner.messages("late")
    counts = runner.late_counts[JOIN.format(tag=tag)]
    assert late and sum(counts.values()) == len(late)
    gone = {(m["pane_id"], m["message"]["value"]["ride"]) for m in late}
    on_time = ([r for r in reqs if ("left", r.value["ride"]) not in gone],
               [a for a in accs if ("right", a.value["ride"]) not in gone])
    assert sorted(runner.messages("matches"), key=repr) == pairs(*on_time)
