"""The run summary's word on late messages: replays are never late (a task skips a replayed
record of an intermediate stream before any window sees it, ``runtime.engine.origins``), so a
late message is disorder, whether or not the run resumed from checkpoints; the replays skipped
are counted on a line of their own."""

from __future__ import annotations

from datetime import timedelta

from runtime.summary import LATE_WHY, late_why_lines, skipped_lines
from samza_dsl import StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem


def _plan() -> tuple[object, str, str]:
    app = StreamApplication("replays")
    local = LocalSystem("local")
    serde = KVSerde(StringSerde(), JsonSerde())
    ev = app.input(local.input("ev", serde=serde, partitions=2))
    (ev.partition_by(lambda kv: kv.key, lambda kv: kv.value, name="by-key")
       .window(Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10),
                                      event_time=lambda kv: kv.value["ts"]), name="w")
       .sink(lambda pane: None, name="out"))
    plan = app.plan()
    (hop,) = plan.intermediate_streams
    return plan, hop, "replays-1-window-w"


def test_late_messages_are_disorder_whether_or_not_the_run_resumed() -> None:
    plan, hop, w = _plan()
    assert late_why_lines({w: {hop: 12}}, plan) == [LATE_WHY]
    assert late_why_lines({w: {hop: 3, "ev": 2}}, plan) == [LATE_WHY]
    assert late_why_lines({}, plan) == []


def test_the_replays_skipped_have_a_line_of_their_own() -> None:
    plan, _, _ = _plan()
    (line,) = skipped_lines({"replays-skipped": 1234}, plan, app_ref=None)
    assert "1,234 record(s) of intermediate streams" in line
    assert "already applied" in line and "Replays applied once" in line
    assert skipped_lines({}, plan, app_ref=None) == []
