"""A first-stage ``partition_by`` of the message with a declared event time takes runs of messages
with its functions mapped in C (``keyed_run`` in ``runtime.engine.task``). Wherever a run does not
qualify (a time that goes back or is behind the channel's progress, a time that is not a number,
a None or unhashable key, a raising function, a control record), the per-message loop takes the
message with its own checks. The same job with runs turned off must give the same outputs in the
same order, the same late messages and the same failure."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runtime.engine.batch as task_module
from samza_dsl import StreamApplication, Windows
from samza_dsl.errors import TaskError
from samza_dsl.systems import MemorySystem
from samza_dsl.testing import TestRunner


class Bad(Exception):
    pass


def event_time(v: dict[str, Any]) -> Any:
    t = v["ts"]
    if t == "raise":
        raise Bad(f"no time in view {v['id']}")
    return t


def key_of(v: dict[str, Any]) -> Any:
    if v["k"] == "raise":
        raise Bad(f"no key in view {v['id']}")
    return v["k"]


def app_of(bound_s: float, factor: int) -> tuple[StreamApplication, Any, Any]:
    mem = MemorySystem()
    app = StreamApplication("runs", config={"job.elasticity.factor": factor})
    inp = mem.input("views", partitions=2, event_time=event_time,
                    max_out_of_orderness=timedelta(seconds=bound_s))
    out = mem.output("counts", partitions=1)
    (app.input(inp)
     .partition_by(key_of, name="by-key")
     .window(Windows.keyed_tumbling(lambda kv: str(kv.key), timedelta(seconds=10), init=int,
                                    fold=lambda kv, n: n + 1,
                                    event_time=lambda kv: float(kv.value["ts"])), name="w")
     .map(lambda p: (p.key.key, p.key.pane_id, p.message, str(p.firing)), name="fmt")
     .send_to(app.output(out)))
    return app, inp, out


def views(seed: int, n: int, back: float, odd: float, fail: str | None) -> dict[int, list[Any]]:
    """Views mostly in time order; ``back`` of them go back in time (some beyond any bound),
    ``odd`` of them have an odd key or time (None key, a list key, an int time); ``fail``
    makes one view's time or key function raise."""
    rnd = random.Random(seed)
    parts: dict[int, list[Any]] = {0: [], 1: []}
    t = 100.0
    for i in range(n):
        t += rnd.random() * 0.2
        ts: Any = round(t - (rnd.choice([0.5, 4.0, 30.0]) if rnd.random() < back else 0.0), 3)
        k: Any = f"k{rnd.randrange(7)}"
        if rnd.random() < odd:
            kind = rnd.randrange(3)
            if kind == 0:
                k = None
            elif kind == 1:
                k = ["not", "hashable"]
            else:
                ts = int(t)
        parts[i % 2].append({"id": i, "ts": ts, "k": k})
    if fail is not None:
        victim = parts[rnd.randrange(2)][rnd.randrange(n // 2 - 1)]
        victim["ts" if fail == "time" else "k"] = "raise"
    return parts


def outcome(bound_s: float, factor: int, data: dict[int, list[Any]]) -> Any:
    app, inp, out = app_of(bound_s, factor)
    try:
        result = TestRunner(app).add_input(inp, data).run(timeout=60)
    except TaskError as err:
        return ("failed", str(err))
    return (result.messages(out), result.late())


def with_runs(monkeypatch: pytest.MonkeyPatch, on: bool, *args: Any) -> Any:
    with monkeypatch.context() as m:
        if not on:
            m.setattr(task_module, "_RUN_MIN", 10**9)
        return outcome(*args)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), n=st.integers(100, 1500),
       back=st.sampled_from([0.0, 0.002, 0.05, 0.5]), odd=st.sampled_from([0.0, 0.003, 0.05]),
       fail=st.sampled_from([None, None, "time", "key"]), bound_s=st.sampled_from([0.0, 5.0]),
       factor=st.sampled_from([1, 1, 2]))
def test_runs_give_what_the_loop_gives(monkeypatch: pytest.MonkeyPatch, seed: int, n: int,
                                       back: float, odd: float, fail: str | None,
                                       bound_s: float, factor: int) -> None:
    data = views(seed, n, back, odd, fail)
    assert with_runs(monkeypatch, True, bound_s, factor, data) \
        == with_runs(monkeypatch, False, bound_s, factor, data)


def test_in_order_views_go_in_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs are taken: in-order views are mapped a run at a time, and give the panes the
    loop gives."""
    taken: list[int] = []
    real = task_module.islice

    def spy(it: Any, *args: Any) -> Any:  # the hand-out steps past each run it took
        if len(args) == 2 and args[1] is not None:
            taken.append(args[1])
        return real(it, *args)

    data = views(5, 3000, 0.0, 0.0, None)
    with monkeypatch.context() as m:
        m.setattr(task_module, "islice", spy)
        got = outcome(0.0, 1, data)
    assert sum(taken) > 2500  # all but the first view of each batch, and the last ones
    assert got == with_runs(monkeypatch, False, 0.0, 1, data)
    assert sum(c for _, _, c, _ in got[0]) == 3000 and got[1] == 0
