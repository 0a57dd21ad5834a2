"""``max_event_time_ahead=`` on an input: a message dated too far ahead of the wall clock follows
the stream's serde error policy instead of moving the watermark, in TestRunner and in
``samza-dsl run`` on the embedded local system (docs/windows.md, "Event times far ahead")."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.errors import EventTimeAheadError, SerdeError
from samza_dsl.systems import LocalSystem, MemorySystem
from samza_dsl.testing import TestRunner

CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
YEAR_9999 = 253402300799.0  # 9999-12-31T23:59:59Z, in seconds
FAR = 1e15  # 1e18 ms: past any date


def counting_app(policy: str | None, ahead: timedelta | None = timedelta(hours=1)
                 ) -> tuple[StreamApplication, Any]:
    config = {"streams.views.samza.serde.error": policy} if policy else None
    app = StreamApplication("ahead", config=config)
    mem = MemorySystem()
    views = mem.input("views", event_time=lambda v: v["ts"], max_event_time_ahead=ahead)
    (app.input(views)
        .window(Windows.tumbling(timedelta(seconds=10), init=lambda: 0,
                                 fold=lambda v, n: n + 1, event_time=lambda v: v["ts"]),
                name="count")
        .map(lambda pane: (int(pane.key.pane_id), pane.message), name="row")
        .send_to(app.output(mem.output("counts"))))
    return app, views


MESSAGES = [{"ts": 1}, {"ts": YEAR_9999}, {"ts": 2}, {"ts": FAR}, {"ts": 15}]


def test_the_descriptor_takes_the_bound_only_beside_an_event_time() -> None:
    local = LocalSystem()
    d = local.input("v", event_time=lambda m: m, max_event_time_ahead=timedelta(minutes=5))
    assert d.max_event_time_ahead_ms == 300_000
    assert local.input("v").max_event_time_ahead_ms == 0
    with pytest.raises(ValueError, match="max_event_time_ahead needs event_time"):
        local.input("v", max_event_time_ahead=timedelta(minutes=5))
    with pytest.raises(ValueError, match="positive"):
        local.input("v", event_time=lambda m: m, max_event_time_ahead=timedelta(seconds=-1))


def test_without_the_bound_a_far_event_time_makes_every_later_message_late() -> None:
    """The rule the option is for: one year-9999 message closes every pane before it."""
    app, views = counting_app("skip", ahead=None)
    result = TestRunner(app).add_input(views, MESSAGES).run()
    assert result.late("count") == 2  # {"ts": 2} and {"ts": 15}


def test_fail_stops_the_run_naming_the_stream_partition_offset_and_event_time() -> None:
    app, views = counting_app(None)
    with pytest.raises(EventTimeAheadError) as err:
        TestRunner(app).add_input(views, MESSAGES).run()
    e = err.value
    assert isinstance(e, SerdeError)
    assert (e.stream, e.partition, e.offset, e.event_time) == ("views", 0, 1, YEAR_9999)
    text = str(e)
    assert "9999-12-31T23:59:59" in text and "ahead of the wall clock" in text
    assert "max_event_time_ahead of input 'views' (1 h)" in text
    assert "streams.views.samza.serde.error to skip or dead-letter" in text
    assert "stream 'views', partition 0, offset 1" in text


@pytest.mark.parametrize("policy", ["skip", "dead-letter"])
def test_skip_and_dead_letter_pass_over_the_far_messages_logged_once_and_counted(
        policy: str, caplog: pytest.LogCaptureFixture) -> None:
    app, views = counting_app(policy)
    with caplog.at_level(logging.WARNING, logger="samza_dsl.event_time"):
        result = TestRunner(app).add_input(views, MESSAGES).run()
    assert result.messages("counts") == [(0, 2), (10000, 1)]
    assert result.late_counts == {}
    assert result.counter("views.event-time-ahead-skipped") == 2
    assert result.counter("event-time-ahead-skipped") == 2
    lines = [r.getMessage() for r in caplog.records if r.name == "samza_dsl.event_time"]
    assert len(lines) == 1, lines
    assert "views partition 0 offset 1" in lines[0]
    assert f"streams.views.samza.serde.error={policy}" in lines[0]
    if policy == "dead-letter":
        assert [(d["source"], d["value"]) for d in result.dead_letters] == [
            ("views/0/1", {"ts": YEAR_9999}), ("views/0/3", {"ts": FAR})]
        assert "ahead of the wall clock" in result.dead_letters[0]["error"]
        assert result.messages("ahead-1-dead-letter") == result.dead_letters
    else:
        assert result.dead_letters == []


def test_a_message_within_the_bound_moves_time_as_any_other() -> None:
    """The bound is against the wall clock, not the other messages: an hour ahead of now, with
    a day allowed, is taken."""
    import time

    soon = time.time() + 3600
    app, views = counting_app(None, ahead=timedelta(days=1))
    result = TestRunner(app).add_input(views, [{"ts": 1}, {"ts": soon}, {"ts": 2}]).run()
    assert result.late("count") == 1  # the soon message moved the watermark: ts 2 is late
    assert result.counter("views.event-time-ahead-skipped") == 0


def test_a_keyed_input_with_several_partitions_and_virtual_tasks() -> None:
    from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde

    app = StreamApplication("ahead-kv", config={"streams.clicks.samza.serde.error": "dead-letter",
                                                "job.elasticity.factor": 2})
    mem = MemorySystem()
    clicks = mem.input("clicks", serde=KVSerde(StringSerde(), JsonSerde()), partitions=3,
                       event_time=lambda kv: kv.value["ts"],
                       max_event_time_ahead=timedelta(hours=1))
    (app.input(clicks)
        .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
                                       init=lambda: 0, fold=lambda kv, n: n + 1,
                                       event_time=lambda kv: kv.value["ts"]), name="per-user")
        .map(lambda pane: KV(pane.key.key, pane.message), name="row")
        .send_to(app.output(mem.output("counts", serde=KVSerde(StringSerde(), JsonSerde())))))
    data = {p: [KV(f"u{p}", {"ts": 1}), KV(f"u{p}", {"ts": FAR}), KV(f"u{p}", {"ts": 3})]
            for p in range(3)}
    result = TestRunner(app).add_input(clicks, data).run()
    assert sorted((kv.key, kv.value) for kv in result.messages("counts")) == [
        ("u0", 2), ("u1", 2), ("u2", 2)]
    assert result.late_counts == {}
    assert sorted(d["source"] for d in result.dead_letters) == [
        "clicks/0/1", "clicks/1/1", "clicks/2/1"]
    assert {d["key"] for d in result.dead_letters} == {"u0", "u1", "u2"}


# -- samza-dsl run on the embedded local system ------------------------------------------------

LOCAL_APP = '''
from datetime import timedelta

from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

local = LocalSystem("local")
app = StreamApplication("ahead")
serde = KVSerde(StringSerde(), JsonSerde())
views = local.input("views", serde=serde, partitions=1, event_time=lambda kv: kv.value["ts"],
                    max_event_time_ahead=timedelta(hours=1))
(app.input(views)
    .window(Windows.tumbling(timedelta(seconds=10), init=lambda: 0, fold=lambda kv, n: n + 1,
                             event_time=lambda kv: kv.value["ts"]), name="count")
    .map(lambda pane: KV(pane.key.pane_id, pane.message), name="row")
    .send_to(app.output(local.output("counts", serde=serde))))
'''


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _local(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(LOCAL_APP)
    lines = [{"key": k, "value": {"ts": ts}} for k, ts in
             [("a", 1), ("b", YEAR_9999), ("c", 2), ("d", FAR), ("e", 15)]]
    data = tmp_path / "views.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return data


def test_samza_dsl_run_fails_on_a_far_event_time_naming_it_then_skip_passes_it(
        tmp_path: Path) -> None:
    data = _local(tmp_path)
    proc = run_cli(tmp_path, "run", "app.py:app", "-q", "--input", f"views={data}")
    assert proc.returncode == 2, proc.stderr
    error = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(error) == 1, proc.stderr
    assert "9999-12-31T23:59:59" in error[0] and "stream 'views', partition 0, offset 1" \
        in error[0] and "--skip views:0:1" in error[0] and "max_event_time_ahead" in error[0]

    # the checkpoint stayed before it: a run with skip passes over both far messages
    proc = run_cli(tmp_path, "run", "app.py:app", "-q", "-c",
                   "streams.views.samza.serde.error=skip")
    assert proc.returncode == 0, proc.stderr
    assert "in: 3 new message(s) (3 from views); 2 more new record(s) read and skipped" \
        in proc.stdout, proc.stdout
    assert "skipped: 2 message(s) of views whose event time was too far ahead" in proc.stdout
    assert "late: no late messages" in proc.stdout
    assert proc.stderr.count("ahead of the wall clock") == 1, proc.stderr  # logged once
    dumped = run_cli(tmp_path, "dump", "app.py:app", "counts")
    assert [json.loads(ln) for ln in dumped.stdout.splitlines()] == [
        {"key": "0", "value": 2}, {"key": "10000", "value": 1}]


def test_samza_dsl_run_dead_letters_the_raw_far_records(tmp_path: Path) -> None:
    data = _local(tmp_path)
    proc = run_cli(tmp_path, "run", "app.py:app", "-q", "--input", f"views={data}", "-c",
                   "streams.views.samza.serde.error=dead-letter")
    assert proc.returncode == 0, proc.stderr
    assert "`samza-dsl dump app.py:app ahead-1-dead-letter`" in proc.stdout
    dumped = run_cli(tmp_path, "dump", "app.py:app", "ahead-1-dead-letter")
    dead = [json.loads(ln) for ln in dumped.stdout.splitlines()]
    assert [(d["source"], d["key"], json.loads(d["value"])) for d in dead] == [
        ("views/0/1", "b", {"ts": YEAR_9999}), ("views/0/3", "d", {"ts": FAR})]
    assert all("ahead of the wall clock" in d["error"] for d in dead)
    counts = run_cli(tmp_path, "dump", "app.py:app", "counts")
    assert [json.loads(ln) for ln in counts.stdout.splitlines()] == [
        {"key": "0", "value": 2}, {"key": "10000", "value": 1}]
