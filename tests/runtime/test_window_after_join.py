"""An event-time window after an event-time join (docs/semantics.md, rule 9).

A join's output pairs messages up to ``within`` apart in event time, so what the window reads
from it may come up to ``within`` (and, for an unmatched message of a left or outer join, the
inputs' bound) behind the latest input: the window allows its messages that much more
out-of-orderness (``WindowSpec.join_lag_ms``). For input in event-time order or within its
bound, none of the join's outputs is late, whichever input is read first, and every runner
counts the pairs the plain-Python answer has: TestRunner, the embedded local system and
Spark."""

from __future__ import annotations

import random
import tempfile
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from runtime.runner import LocalRunner
from runtime.testing import TestRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.spec import JoinSpec, WindowSpec
from samza_dsl.systems import LocalSystem, MemorySystem
from tests.runtime.etjoin_app import BOUND_S, WITHIN_S, pairs, ride_time, rides

PANE_MS = 60_000


def _pair(req: KV[str, Any] | None, acc: KV[str, Any] | None) -> dict[str, Any]:
    """The join's output: the request's driver, ride and time (which the window reads)."""
    assert req is not None
    return {"driver": req.key, "ts": req.value["ts"], "ride": req.value["ride"],
            "acc": None if acc is None else acc.value["ride"]}


def _unwrapped(kv: KV[str, Any]) -> KV[str, Any]:
    return kv.value  # the message a partition_by wrapped


def build(system: Any, *, hops: bool, session: bool = False, priority: int = 0,
          partitions: int = 2) -> StreamApplication:
    """Requests joined with acceptances of the same driver within ``WITHIN_S`` (inner), each
    input declaring its event time and a bound of ``BOUND_S``; then the number of pairs per
    driver in 1 min tumbling panes (or 30 s sessions) of the request's time, to ``counts`` as
    ``[driver, pane id, count]``. ``hops``: both sides go through ``partition_by`` driver
    first. ``priority``: the requests' (so they are read before the acceptances)."""
    app = StreamApplication("window-after-join")
    serde = KVSerde(StringSerde(), JsonSerde())
    bound = timedelta(seconds=BOUND_S)
    requests = app.input(system.input("requests", serde=serde, partitions=partitions,
                                      event_time=ride_time, max_out_of_orderness=bound,
                                      priority=priority))
    accepts = app.input(system.input("accepts", serde=serde, partitions=partitions,
                                     event_time=ride_time, max_out_of_orderness=bound))
    if hops:
        requests = requests.partition_by(lambda kv: kv.key, name="req-by-driver") \
            .map(_unwrapped, name="req-unwrapped")
        accepts = accepts.partition_by(lambda kv: kv.key, name="acc-by-driver") \
            .map(_unwrapped, name="acc-unwrapped")
    joined = requests.join(accepts, key=lambda kv: kv.key, other_key=lambda kv: kv.key,
                           combine=_pair, name="accepted", within=timedelta(seconds=WITHIN_S))
    if session:
        window = Windows.keyed_session(lambda m: m["driver"], timedelta(seconds=30),
                                       init=lambda: 0, fold=lambda m, n: n + 1,
                                       event_time=lambda m: m["ts"])
    else:
        window = Windows.keyed_tumbling(lambda m: m["driver"], timedelta(milliseconds=PANE_MS),
                                        init=lambda: 0, fold=lambda m, n: n + 1,
                                        event_time=lambda m: m["ts"])
    joined.window(window, name="per-driver") \
        .map(lambda p: [p.key.key, p.key.pane_id, p.message], name="row") \
        .send_to(app.output(system.output("counts", serde=JsonSerde(), partitions=1)))
    return app


def _inputs(reqs: list[KV[str, Any]], accs: list[KV[str, Any]],
            partitions: int = 2) -> dict[str, dict[int, list[KV[str, Any]]]]:
    """Each input's messages dealt over its partitions in turn, each partition in order."""
    return {sid: {p: msgs[p::partitions] for p in range(partitions)}
            for sid, msgs in (("requests", reqs), ("accepts", accs))}


def expected_counts(reqs: list[KV[str, Any]], accs: list[KV[str, Any]]) -> Counter[Any]:
    """The plain-Python answer: pairs per (driver, pane of the request's time)."""
    times = {r.value["ride"]: (r.key, round(r.value["ts"] * 1000)) for r in reqs}
    out: Counter[Any] = Counter()
    for ride, _ in pairs(reqs, accs):
        driver, ms = times[ride]
        out[driver, str(ms - ms % PANE_MS)] += 1
    return out


def run(runner: str, app_of: Any, inputs: dict[str, Any], spark: Any = None,
        ) -> tuple[Counter[Any], dict[str, Any]]:
    """(pairs per (driver, pane), late counts) of the app on ``runner``."""
    def counted(rows: list[Any]) -> Counter[Any]:
        return Counter({(d, pane): n for d, pane, n in rows})

    if runner == "TestRunner":
        tested = TestRunner(app_of(MemorySystem()))
        for sid, parts in inputs.items():
            tested.add_input(sid, parts)
        result = tested.run(timeout=120)
        return counted(result.messages("counts")), result.late_counts
    if runner == "LocalRunner":
        with tempfile.TemporaryDirectory() as tmp:
            local = LocalRunner(app_of(LocalSystem("local")), {"job.dir": tmp},
                                inputs=inputs).run()
            try:
                return counted(local.messages("counts")), local.late_counts
            finally:
                local.close()
    from runtime.spark import SparkRunner

    done = SparkRunner(spark).reprocess(app_of(MemorySystem()), inputs)
    return counted(done.messages("counts")), done.late_counts


#: the smallest case: the pair (d, 290 s ~ 340 s) is made after (e, 310 s ~ 320 s), so its
#: time is behind a pane end the window has seen pass
SMALL_REQS = [KV(d, {"ride": i, "ts": t}) for i, (d, t) in enumerate([("d", 290.0), ("e", 310.0),
                                                                      ("f", 400.0)])]
SMALL_ACCS = [KV(d, {"ride": 100 + i, "ts": t}) for i, (d, t) in enumerate(
    [("e", 320.0), ("d", 340.0), ("f", 410.0)])]


@pytest.mark.parametrize("runner", ["TestRunner", "LocalRunner", "SparkRunner"])
@pytest.mark.parametrize("session", [False, True], ids=["tumbling", "session"])
def test_a_pair_made_after_a_later_one_is_not_late(runner: str, session: bool,
                                                   request: pytest.FixtureRequest) -> None:
    """The requests are read first (priority): the acceptances then make (e, 310 s) before
    (d, 290 s), and the window's watermark had passed 300 s by then without the join's lag."""
    spark = request.getfixturevalue("spark") if runner == "SparkRunner" else None
    counts, late = run(runner, lambda s: build(s, hops=False, session=session, priority=1,
                                               partitions=1),
                       _inputs(SMALL_REQS, SMALL_ACCS, partitions=1), spark)
    assert late == {}
    if session:  # a session per driver, its id its first time
        assert counts == Counter({("d", "290000"): 1, ("e", "310000"): 1, ("f", "400000"): 1})
    else:
        assert counts == Counter({("d", "240000"): 1, ("e", "300000"): 1, ("f", "360000"): 1})


@pytest.mark.parametrize("runner", ["TestRunner", "LocalRunner", "SparkRunner"])
def test_pairs_per_driver_and_pane_after_hops_equal_the_plain_python_answer(
        runner: str, request: pytest.FixtureRequest) -> None:
    """Requests and acceptances (up to 90 s after the request, 2 s of disorder), each through
    ``partition_by`` driver, joined within 60 s, counted per driver in 1 min panes."""
    spark = request.getfixturevalue("spark") if runner == "SparkRunner" else None
    reqs, accs = rides(random.Random(62), 1500, disorder_s=2.0)
    want = expected_counts(reqs, accs)
    assert sum(want.values()) > 1000 and len({pane for _, pane in want}) >= 3
    counts, late = run(runner, lambda s: build(s, hops=True), _inputs(reqs, accs), spark)
    assert late == {}
    assert counts == want


def test_the_plan_carries_the_joins_lag_to_what_reads_its_outputs() -> None:
    """A window after the join allows its ``within`` and its inputs' bound; one that reads
    an input directly, nothing; a join after the join, the same lag on that side."""
    app = build(MemorySystem(), hops=True)
    spec = app.spec()
    window = next(op for op in spec.operators if isinstance(op, WindowSpec))
    assert window.join_lag_ms == (WITHIN_S + BOUND_S) * 1000
    assert window.details()["join_lag_ms"] == window.join_lag_ms

    app2 = StreamApplication("lags")
    mem = MemorySystem()
    a = app2.input(mem.input("a", event_time=lambda m: m["ts"],
                             max_out_of_orderness=timedelta(seconds=2)))
    b = app2.input(mem.input("b", event_time=lambda m: m["ts"]))
    c = app2.input(mem.input("c", event_time=lambda m: m["ts"]))
    plain = a.window(Windows.keyed_tumbling(lambda m: m["k"], timedelta(minutes=1),
                                            event_time=lambda m: m["ts"]), name="plain")
    plain.send_to(app2.output(mem.output("plain-out")))
    first = a.join(b, key=lambda m: m["k"], other_key=lambda m: m["k"],
                   combine=lambda x, y: x, name="first", within=timedelta(seconds=10))
    second = first.join(c, key=lambda m: m["k"], other_key=lambda m: m["k"],
                        combine=lambda x, y: x, name="second", within=timedelta(seconds=30))
    second.send_to(app2.output(mem.output("second-out")))
    ops = {op.op_id.rsplit("-", 1)[-1]: op for op in app2.spec().operators}
    assert isinstance(ops["plain"], WindowSpec) and ops["plain"].join_lag_ms == 0
    second_spec = ops["second"]
    assert isinstance(second_spec, JoinSpec)
    assert [s.lag_ms for s in second_spec.sides] == [12_000, 0]
