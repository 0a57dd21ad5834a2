"""A stage keeps up with the stages that write to it: a task takes its intermediate partitions'
records before its inputs' (``runtime.engine.chooser``), reads them on while its inbox is full of input,
and does not count them against its batch budget. So what waits between two stages stays
bounded however unevenly the keys fall, instead of growing with the input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime import LocalRunner, TestRunner
from runtime.engine.chooser import Batch, Chooser
from runtime.engine.job import SSP
from samza_dsl import StreamApplication
from samza_dsl.systems import LocalSystem, MemorySystem

N = 100_000
#: about what the four tasks' first stage hands out in two rounds; a backlog growing with the
#: input passes it
BOUND = 25_000


def test_intermediate_batches_go_before_inputs_of_their_rank() -> None:
    inbox = Chooser({"alerts": 2, "archive": -1}, downstream={"by-user"})
    for sid in ("archive", "clicks", "by-user", "alerts", "clicks", "by-user"):
        inbox.append(Batch(SSP(sid, 0), 0, [sid]))
    assert [inbox.popleft().ssp.stream_id for _ in range(6)] == [
        "alerts", "by-user", "by-user", "clicks", "clicks", "archive"]
    inbox.append(Batch(SSP("clicks", 0), 0, [1]))
    assert not inbox.outranks(SSP("by-user", 0))
    inbox.append(Batch(SSP("by-user", 0), 0, [2]))
    assert inbox.outranks(SSP("clicks", 0))


def _skewed_app(system: Any, lags: list[int]) -> tuple[StreamApplication, Any]:
    """Every message goes to one intermediate partition; the second stage records, for each
    message, how many messages the first stage handled after it."""
    handled = [0]
    at: dict[int, int] = {}

    def first(m: int) -> int:
        handled[0] += 1
        at[m] = handled[0]
        return m

    def second(kv: Any) -> int:
        lags.append(handled[0] - at.pop(kv.value))
        return int(kv.value)

    app = StreamApplication("skewed")
    inp = system.input("events", partitions=4)
    (app.input(inp).map(first, name="first")
        .partition_by(lambda m: "one-key", name="by-key")
        .map(second, name="second").sink(lambda m: None, name="done"))
    return app, inp


def _inputs() -> dict[int, list[int]]:
    return {p: list(range(p, N, 4)) for p in range(4)}


def test_the_backlog_between_two_stages_stays_bounded_in_memory() -> None:
    lags: list[int] = []
    app, inp = _skewed_app(MemorySystem(), lags)
    TestRunner(app).add_input(inp, _inputs()).run(timeout=120)
    assert len(lags) == N
    assert max(lags) < BOUND, f"the second stage fell {max(lags)} messages behind"


def test_the_backlog_between_two_stages_stays_bounded_on_the_local_system(
        tmp_path: Path) -> None:
    lags: list[int] = []
    system = LocalSystem("local")
    app, inp = _skewed_app(system, lags)
    LocalRunner(app, {"job.dir": str(tmp_path / "job")}, inputs={"events": _inputs()}).run()
    assert len(lags) == N
    assert max(lags) < BOUND, f"the second stage fell {max(lags)} messages behind"
