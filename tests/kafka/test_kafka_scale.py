"""Jobs on Kafka (tansu on 127.0.0.1) across processes: the page-view example end to end, two
containers through a real intermediate topic, a container SIGKILLed mid-stream and restarted,
and the elasticity factor changed from 1 to 2 to 4 to 2 across restarts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from kafka_apps import regroup_app, tag_app
from kafka_helpers import consume_all, create_topic, keyed, produce_each, run

from runtime import LocalRunner
from runtime.kafka.admin import describe_topics
from samza_dsl.systems import KafkaSystem

ROOT = Path(__file__).parents[2]
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
sys.path.insert(0, str(ROOT / "examples"))
import page_view_counts  # noqa: E402


def _tag() -> str:
    return uuid.uuid4().hex[:8]


def _records(msgs: list[Any], partitions: int) -> list[tuple[int, bytes | None, bytes | None]]:
    return keyed(((str(m.key), m.value) for m in msgs), partitions)


def _events(start: int, n: int) -> list[tuple[int, bytes | None, bytes | None]]:
    return keyed(((f"e{i}", {"i": i}) for i in range(start, start + n)), 4)


def test_the_page_view_example_runs_end_to_end_on_kafka(kafka_bootstrap: str,
                                                        tmp_path: Path) -> None:
    tag = _tag()
    topics = {sid: f"{sid}-{tag}" for sid in ("page-views", "logins", "page-view-counts")}
    app = page_view_counts.build_app(KafkaSystem("kafka", bootstrap_servers=kafka_bootstrap),
                                     name=f"page-view-counts-{tag}", topics=topics)
    sample = page_view_counts.sample_input(600)
    run(create_topic(kafka_bootstrap, topics["page-views"], 4))
    run(create_topic(kafka_bootstrap, topics["logins"], 2))
    run(produce_each(kafka_bootstrap, topics["logins"], _records(sample["logins"], 2)))
    run(produce_each(kafka_bootstrap, topics["page-views"], _records(sample["page-views"], 4)))
    config = {"job.dir": str(tmp_path / "job")}

    first = LocalRunner(app, config).run()
    counts = first.messages("page-view-counts")
    assert counts, "no panes"
    humans = [v for v in sample["page-views"] if not v.value["bot"]]
    assert sum(m.value["views"] for m in counts) <= len(humans)
    for m in counts:
        page, country = m.key.rsplit("|", 1)
        assert page in page_view_counts.PAGES and country in page_view_counts.COUNTRIES
        assert m.value["window_start_ms"] % 10_000 == 0
    # both intermediate streams are topics with the planned 4 partitions
    intermediates = [s.physical_name for s in first.plan.streams.values()
                     if s.kind == "intermediate"]
    assert len(intermediates) == 2
    assert run(describe_topics(kafka_bootstrap, intermediates)) == {t: 4 for t in intermediates}
    # the end of both bounded inputs reached the job's end through both intermediate topics,
    # and a second run resumes after the checkpoints
    assert LocalRunner(app, config).run().messages("page-view-counts") == []


def test_two_containers_through_a_real_intermediate_topic(kafka_bootstrap: str,
                                                          tmp_path: Path) -> None:
    tag = _tag()
    run(create_topic(kafka_bootstrap, f"events-{tag}", 4))
    run(produce_each(kafka_bootstrap, f"events-{tag}", _events(0, 400)))
    app = regroup_app(kafka_bootstrap, tag, **{"job.container.count": 2})
    config = {"job.dir": str(tmp_path / "job")}
    runner = LocalRunner(app, config).run()
    out = runner.messages("out")
    assert sorted(m.value[1] for m in out) == list(range(400))
    pids = {m.value[0] for m in out}
    assert len(pids) == 2 and os.getpid() not in pids
    # container 0 runs tasks 0 and 2, container 1 tasks 1 and 3, of the second stage
    by_pid: dict[int, set[str]] = defaultdict(set)
    for m in out:
        by_pid[m.value[0]].add(m.value[2])
    assert sorted(sorted(t) for t in by_pid.values()) == [
        ["Partition 0", "Partition 2"], ["Partition 1", "Partition 3"]]
    assert LocalRunner(app, config).run().messages("out") == []
    run(produce_each(kafka_bootstrap, f"events-{tag}", _events(400, 40)))
    assert sorted(m.value[1] for m in LocalRunner(app, config).run().messages("out")) == \
        list(range(400, 440))


def _container(i: int, bootstrap: str, tag: str, job_dir: Path, delay: float
               ) -> subprocess.Popen[str]:
    progress = job_dir.parent / "progress"
    progress.mkdir(exist_ok=True)
    env = {**os.environ, "SAMZA_TEST_BOOTSTRAP": bootstrap, "SAMZA_TEST_TAG": tag,
           "SAMZA_TEST_DELAY": str(delay), "SAMZA_TEST_PROGRESS": str(progress)}
    log = open(job_dir.parent / f"container-{i}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
    return subprocess.Popen(
        [CLI, "run", f"{Path(__file__).parent / 'kafka_apps.py'}:app", "--follow", "-q",
         "--containers", "2", "--container-id", str(i), "-c", f"job.dir={job_dir}"],
        env=env, stdout=log, stderr=subprocess.STDOUT, text=True)


def _outputs(bootstrap: str, tag: str) -> list[list[Any]]:
    topic = f"out-{tag}"
    # reading a topic that does not exist yet would make tansu create it with 4 partitions
    if run(describe_topics(bootstrap, [topic]))[topic] is None:
        return []
    got = run(consume_all(bootstrap, topic, 3))
    return [json.loads(v) for records in got.values() for _, _, v in records if v]


def test_a_container_killed_mid_stream_restarts_and_nothing_is_lost(kafka_bootstrap: str,
                                                                     tmp_path: Path) -> None:
    tag = _tag()
    n = 3000
    run(create_topic(kafka_bootstrap, f"events-{tag}", 4))
    run(produce_each(kafka_bootstrap, f"events-{tag}", _events(0, n)))
    job_dir = tmp_path / "job"
    procs = [_container(i, kafka_bootstrap, tag, job_dir, delay=0.004) for i in range(2)]
    try:
        # wait until container 1 has processed some messages, then kill it mid-stream
        progress = tmp_path / "progress" / str(procs[1].pid)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if progress.exists() and int(progress.read_text() or 0) >= 100:
                break
            assert procs[1].poll() is None, "container 1 ended early"
            time.sleep(0.02)
        else:
            raise AssertionError("container 1 processed nothing within 60 s")
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait(10)
        killed_at = len(_outputs(kafka_bootstrap, tag))
        assert killed_at < n, "the job had finished before the kill"
        procs[1] = _container(1, kafka_bootstrap, tag, job_dir, delay=0.0)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            done = {o[1] for o in _outputs(kafka_bootstrap, tag)}
            if len(done) == n:
                break
            for p in procs:
                assert p.poll() is None, f"a container exited with {p.returncode}"
            time.sleep(0.3)
        outs = _outputs(kafka_bootstrap, tag)
        assert {o[1] for o in outs} == set(range(n))  # at least once: nothing lost
        restarted = procs[1].pid
        pids = Counter(o[0] for o in outs)
        assert pids[restarted] > 0, (pids, [p.pid for p in procs], killed_at)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0]  # SIGTERM: drained and committed


def test_changing_the_elasticity_factor_across_restarts_on_kafka(kafka_bootstrap: str,
                                                                 tmp_path: Path) -> None:
    tag = _tag()
    run(create_topic(kafka_bootstrap, f"in-{tag}", 2))
    config = {"job.dir": str(tmp_path / "job")}
    seen: dict[str, list[int]] = defaultdict(list)
    total = 0
    for factor in (1, 2, 4, 2):
        records = keyed(((f"k{i % 120}", i) for i in range(total, total + 200)), 2)
        run(produce_each(kafka_bootstrap, f"in-{tag}", records))
        total += 200
        runner = LocalRunner(tag_app(kafka_bootstrap, tag, factor), config).run()
        out = runner.messages("out")
        expected = ({f"Partition {p}" for p in range(2)} if factor == 1 else
                    {f"Partition {p} bucket {b} of {factor}" for p in range(2)
                     for b in range(factor)})
        assert {m.value[0] for m in out} == expected
        for m in out:
            seen[m.key].append(m.value[1])
        assert set(runner.job.checkpoints.tasks()) >= expected
    assert {v for vs in seen.values() for v in vs} == set(range(total))
    for key, values in seen.items():
        first_seen = [v for i, v in enumerate(values) if v not in values[:i]]
        assert first_seen == sorted(first_seen), key
