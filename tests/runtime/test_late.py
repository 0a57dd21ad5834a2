"""Late data is never silent (docs/semantics.md rule 8): every late message is counted per window and
per input stream, shown by ``TestResult``, and the first one of each window and stream is logged
in one line with its stream, partition, offset and how far behind the watermark it was; later ones
at most once every ``LOG_EVERY_S`` with the count so far."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest

from samza_dsl import KV, StreamApplication, Triggers, Windows
from samza_dsl.errors import SamzaError
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner

RUN_TIMEOUT = 30.0


def et(m: Any) -> float:
    return float(m.value if isinstance(m, KV) else m)


def _app(window: Any = None, *, two_inputs: bool = False, late_to: bool = False
         ) -> tuple[Any, ...]:
    mem = MemorySystem()
    app = StreamApplication("late")
    a = mem.input("clicks")
    b = mem.input("views")
    out = mem.output("panes")
    stream = app.input(a)
    if two_inputs:
        stream = stream.merge(app.input(b))
    w = window or Windows.tumbling(timedelta(seconds=10), event_time=et)
    panes = stream.window(w, name="per-10s",
                          late_to=app.output(mem.output("late-ones")) if late_to else None)
    panes.send_to(app.output(out))
    return app, a, b, out, panes


def test_late_messages_are_counted_per_window() -> None:
    app, a, b, out, panes = _app()
    # each partition is a task of its own, each in event-time order but for the small ones
    result = TestRunner(app).add_input(a, {0: [1.0, 25.0, 3.0, 4.0, 31.0], 1: [2.0, 45.0, 5.0]}
                                       ).run(timeout=RUN_TIMEOUT)
    assert result.late_counts == {"late-1-window-per-10s": {"clicks": 3}}
    assert result.late() == result.late(panes) == result.late("per-10s") \
        == result.late("late-1-window-per-10s") == result.late(stream="clicks") \
        == result.late(panes, stream=a) == 3
    assert result.metrics["late-1-window-per-10s.late-messages-dropped"] == 3
    assert result.metrics["late-1-window-per-10s.late-messages.clicks"] == 3
    with pytest.raises(SamzaError, match="windows: late-1-window-per-10s"):
        result.late("nope")
    with pytest.raises(SamzaError, match="not a stream"):
        result.late(stream="nope")


def test_late_messages_of_a_merge_are_counted_by_the_stream_they_came_from(
        caplog: pytest.LogCaptureFixture) -> None:
    app, a, b, out, panes = _app(two_inputs=True)
    small = {"clicks": [1.0, 2.0], "views": [5.0, 6.0, 7.0]}
    with caplog.at_level(logging.WARNING, logger="samza_dsl.window"):
        result = (TestRunner(app).add_input(a, [50.0, *small["clicks"]])
                  .add_input(b, [50.0, *small["views"]]).run(timeout=RUN_TIMEOUT))
    counts = result.late_counts.get("late-1-window-per-10s", {})
    assert set(counts) <= {"clicks", "views"} and result.late() == sum(counts.values()) > 0
    warnings = [r.getMessage() for r in caplog.records if r.name == "samza_dsl.window"]
    assert len(warnings) == len(counts)  # once per stream with late messages
    for sid, n in counts.items():
        assert 0 < n == result.late(stream=sid) <= len(small[sid])
        [w] = [w for w in warnings if f"stream {sid!r}" in w]
        offset = int(w.split(" offset ")[1].split(",")[0])
        assert offset >= 1  # a small message, not the first one at offset 0


def test_a_run_without_late_messages_says_zero() -> None:
    app, a, _, out, panes = _app()
    result = TestRunner(app).add_input(a, [1.0, 2.0, 12.0]).run(timeout=RUN_TIMEOUT)
    assert result.late_counts == {}
    assert result.late() == 0 and result.late(panes) == 0


def test_the_first_late_message_of_a_window_and_stream_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    # one input, so the watermark is that partition's own progress, message by message (with a
    # merge it is the minimum over both inputs, and which one is ahead depends on the handout
    # order; the merge test above covers one warning per stream)
    app, a, b, out, panes = _app()
    with caplog.at_level(logging.WARNING, logger="samza_dsl.window"):
        result = TestRunner(app).add_input(a, [1.0, 25.0, 3.0, 4.0]).run(timeout=RUN_TIMEOUT)
    warnings = [r.getMessage() for r in caplog.records if r.name == "samza_dsl.window"]
    assert len(warnings) == 1, warnings  # once, though 2 messages were late
    assert result.late(stream="clicks") == 2
    assert warnings[0] == (
        "window 'late-1-window-per-10s': 1 late message(s) from stream 'clicks' dropped so far "
        "(latest: partition 0 offset 2, 22000 ms behind the watermark); to keep them see "
        "docs/windows.md#late-messages")


def test_many_late_messages_give_one_short_line_not_one_each(
        caplog: pytest.LogCaptureFixture) -> None:
    app, a, b, out, panes = _app()
    late = [float(i % 20) for i in range(500)]  # all behind the first message's watermark
    with caplog.at_level(logging.WARNING, logger="samza_dsl.window"):
        result = TestRunner(app).add_input(a, [100.0, *late]).run(timeout=RUN_TIMEOUT)
    assert result.late(stream="clicks") == 500
    warnings = [r.getMessage() for r in caplog.records if r.name == "samza_dsl.window"]
    assert len(warnings) == 1, warnings
    [line] = warnings
    assert "\n" not in line and len(line) < 250, line
    assert line.startswith("window 'late-1-window-per-10s': 1 late message(s) from stream "
                           "'clicks' dropped")
    assert line.endswith("see docs/windows.md#late-messages")


def test_a_later_line_gives_the_count_so_far(caplog: pytest.LogCaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import operators.late

    monkeypatch.setattr(operators.late, "LOG_EVERY_S", 0.0)  # every late message is due a line
    app, a, b, out, panes = _app(late_to=True)
    with caplog.at_level(logging.WARNING, logger="samza_dsl.window"):
        TestRunner(app).add_input(a, [100.0, 1.0, 2.0, 3.0]).run(timeout=RUN_TIMEOUT)
    warnings = [r.getMessage() for r in caplog.records if r.name == "samza_dsl.window"]
    assert [w.split(": ")[1].split(" late")[0] for w in warnings] == ["1", "2", "3"]
    assert all("from stream 'clicks' sent to 'late-ones' so far" in w
               for w in warnings), warnings
    assert "latest: partition 0 offset 3, 97000 ms behind" in warnings[-1]


def test_after_an_async_step_the_warning_names_the_late_message_s_own_offset(
        caplog: pytest.LogCaptureFixture) -> None:
    mem = MemorySystem()
    app = StreamApplication("late-async")
    inp = mem.input("in", partitions=1)
    out = mem.output("panes")

    async def call(m: float) -> list[float]:
        # the window runs in the asyncio task that completes m; 3.0 (out of order, no bound
        # declared) completes well after 25.0 has moved the watermark
        await asyncio.sleep(0.05 if m == 3.0 else 0.001)
        return [m]

    (app.input(inp).async_flat_map(call, name="call")
     .window(Windows.tumbling(timedelta(seconds=10), event_time=float), name="w")
     .send_to(app.output(out)))
    with caplog.at_level(logging.WARNING, logger="samza_dsl.window"):
        result = TestRunner(app, {"task.max.concurrency": 4}).add_input(
            inp, [1.0, 25.0, 3.0, 26.0]).run(timeout=RUN_TIMEOUT)
    assert result.late() == 1
    [warning] = [r.getMessage() for r in caplog.records if r.name == "samza_dsl.window"]
    assert "from stream 'in' dropped so far (latest: partition 0 offset 2," in warning


def test_messages_within_allowed_lateness_update_late_panes_and_are_not_counted() -> None:
    w = (Windows.tumbling(timedelta(seconds=10), event_time=et)
         .allowed_lateness(timedelta(seconds=10)).late_trigger(Triggers.count(1)))
    app, a, _, out, panes = _app(w)
    result = TestRunner(app).add_input(a, [1.0, 15.0, 2.0, 35.0, 3.0]).run(timeout=RUN_TIMEOUT)
    firings = [(p.key.pane_id, p.firing.name) for p in result.messages(out)]
    assert ("0", "LATE") in firings  # 2.0 came within the lateness
    assert result.late() == 1  # 3.0 came past it
