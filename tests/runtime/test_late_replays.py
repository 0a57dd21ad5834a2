"""The run summary's word on late messages names replays as such: at least once, a run that
resumed from checkpoints (a restart, a takeover in the group) and found messages of an
intermediate stream late is told they are most likely an upstream task's replays, not advised to
raise ``max_out_of_orderness`` (which would count them twice)."""

from __future__ import annotations

from datetime import timedelta

from runtime.summary import LATE_WHY, late_why_lines
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


def test_late_copies_after_a_restart_at_least_once_are_named_replays() -> None:
    plan, hop, w = _plan()
    lines = late_why_lines({w: {hop: 12}}, plan, resumed=True, exactly=False)
    assert LATE_WHY not in lines  # no advice to wait longer for them
    (line,) = lines
    assert f"those from {hop} are most likely replays, not disorder" in line
    assert "job.processing.guarantee=exactly-once never replays them" in line
    # late input messages too: both reasons
    both = late_why_lines({w: {hop: 3, "ev": 2}}, plan, resumed=True, exactly=False)
    assert both[0] == LATE_WHY and "replays" in both[1]


def test_disorder_is_disorder_when_nothing_can_have_replayed() -> None:
    plan, hop, w = _plan()
    for resumed, exactly in [(False, False), (True, True), (False, True)]:
        assert late_why_lines({w: {hop: 5}}, plan, resumed=resumed, exactly=exactly) == [LATE_WHY]
    assert late_why_lines({}, plan, resumed=True, exactly=False) == []
