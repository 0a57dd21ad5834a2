"""The reference model's rule for ``max_event_time_ahead`` (``model.within_ahead``) against
TestRunner: drawn partitions with messages dated in the year 9999 or at 1e18 ms give the same
panes and late counts, with the bound (they are passed over) and without it (they move the
watermark, and what follows is late)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner
from samza_dsl.testing.model import interleave, run_window, within_ahead

SERDE = KVSerde(StringSerde(), JsonSerde())
HOUR_MS = 3_600_000
FAR_TIMES = [253402300799_000, 10**18]  # ms: the year 9999, and past any date


def et(kv: Any) -> float:
    return kv.value["t"] / 1000.0


WINDOW = Windows.keyed_tumbling(lambda kv: kv.key, timedelta(seconds=10), event_time=et)


def build(bounded: bool) -> tuple[StreamApplication, Any]:
    app = StreamApplication("model-ahead", config={"streams.in.samza.serde.error": "skip"})
    mem = MemorySystem()
    inp = mem.input("in", serde=SERDE, event_time=et,
                    max_event_time_ahead=timedelta(hours=1) if bounded else None)
    (app.input(inp).window(WINDOW, name="w")
        .map(lambda p: (p.key.key, p.key.pane_id, p.firing.name,
                        [m.value["t"] for m in p.message]), name="row")
        .send_to(app.output(mem.output("out"))))
    return app, inp


times = st.one_of(st.integers(0, 60_000), st.sampled_from(FAR_TIMES))
partition = st.lists(st.tuples(st.sampled_from(["a", "b"]), times), max_size=12)


@settings(max_examples=25, deadline=None)
@given(data=st.dictionaries(st.integers(0, 2), partition, min_size=1), bounded=st.booleans())
def test_testrunner_equals_the_model_with_far_event_times(data: dict[int, list[Any]],
                                                          bounded: bool) -> None:
    n = max(data) + 1
    parts = {p: [KV(k, {"t": t}) for k, t in data.get(p, [])] for p in range(n)}
    app, inp = build(bounded)
    result = TestRunner(app).add_input(inp, parts).run()

    now_ms = time.time() * 1000.0
    panes: list[Any] = []
    late = 0
    taken = 0
    for p, msgs in parts.items():  # a task per partition
        kept = msgs
        if bounded:
            kept, out = within_ahead(msgs, et, HOUR_MS, now_ms)
            taken += len(out)
        handouts = []
        latest: float | None = None
        for kv in kept:
            latest = kv.value["t"] if latest is None else max(latest, kv.value["t"])
            handouts.append(([kv], latest))
        model = run_window(WINDOW, interleave({p: handouts}, stream="in"))
        panes += [(mp.key, mp.pane_id, mp.firing.name, [m.value["t"] for m in mp.value])
                  for mp in model.panes]
        late += model.late_counts.get("in", 0)

    assert sorted(result.messages("out")) == sorted(panes)
    assert result.late("w") == late
    assert result.counter("in.event-time-ahead-skipped") == taken
