"""Bootstrap and priority inputs on Kafka (tansu on 127.0.0.1): a bootstrap topic is read to its
end before the task's other topics on every start, a restart included, and a higher-priority
topic goes first (docs/semantics.md, "Bootstrap and priority inputs")."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

from kafka_helpers import create_topic, produce_batched, run

from runtime import LocalRunner
from samza_dsl.systems import KafkaSystem

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
from test_bootstrap_priority import build, sources  # noqa: E402

N = 300
INPUTS = ("clicks", "alerts", "profiles")


def _produce(bootstrap: str, tag: str, start: int) -> None:
    for sid in INPUTS:
        run(produce_batched(bootstrap, f"{sid}-{tag}",
                            [(0, None, json.dumps(m).encode()) for m in range(start, start + N)]))


def _app(servers: str, tag: str, **kw: Any) -> Any:
    return build(KafkaSystem("kafka", bootstrap_servers=servers), name=f"order-{tag}",
                 suffix=f"-{tag}", **kw)


def _topics(bootstrap: str, tag: str) -> None:
    for sid in (*INPUTS, "out"):
        run(create_topic(bootstrap, f"{sid}-{tag}", 1))


def _run(app: Any, job_dir: Path) -> list[Any]:
    runner = LocalRunner(app, {"job.dir": str(job_dir)}).run()
    try:
        return list(runner.messages("out"))
    finally:
        runner.close()


def test_a_bootstrap_topic_is_read_first_on_every_start(kafka_bootstrap: str,
                                                        tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    _topics(kafka_bootstrap, tag)
    _produce(kafka_bootstrap, tag, 0)
    # the lowest priority: only bootstrapping puts profiles first
    app = _app(kafka_bootstrap, tag, bootstrap=True, priorities={"profiles": -5})
    first = _run(app, tmp_path / "job")
    assert len(first) == 3 * N and first[:N] == [["profiles", m] for m in range(N)]
    _produce(kafka_bootstrap, tag, N)  # more of every topic, then a restart
    second = _run(app, tmp_path / "job")
    assert len(second) == 3 * N and second[:N] == [["profiles", m] for m in range(N, 2 * N)]


def test_higher_priority_topics_go_first(kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    _topics(kafka_bootstrap, tag)
    _produce(kafka_bootstrap, tag, 0)
    app = _app(kafka_bootstrap, tag, priorities={"profiles": 1, "alerts": 7})
    out = _run(app, tmp_path / "job")
    assert sources(out) == ["alerts", "profiles", "clicks"]
    assert [m for _, m in out] == list(range(N)) * 3
