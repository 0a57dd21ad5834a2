"""The batch run of a stream into one operator that gives lists of outputs (a window, a
flat_map...): the operator's ``process`` per message, or its ``process_run`` over a run, or
``process_columns`` over a run given as columns (``RunColumns``), what it gives forwarded
downstream. The streaming task and Spark's ``PassExecutor`` both run it. The rules it shares
with the other runs are ``runtime.engine.batch_rules``.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple

from operators.base import FailedAt, Operator
from runtime.engine.batch_rules import CONTROL_TYPES, BatchRun
from runtime.engine.batch_rules import fail as _fail
from runtime.engine.batch_rules import first_call as _first_call
from runtime.engine.batch_rules import meter_batch as _count
from runtime.engine.batch_rules import skipped as _skipped
from runtime.engine.dag import Emit, continue_outputs, counted, forward
from runtime.engine.handout import Cursor
from runtime.host.metrics import OpMeter
from samza_dsl.kv import KV

__all__ = ["RunColumns", "operator_run"]


class RunColumns(NamedTuple):
    """A batch's records given as columns, for an operator's ``process_columns`` (Spark, where
    a window's key and event-time functions read fields the batch has as columns): record j's
    key ``keys[j]`` and event time in ms ``xs[j]``, what its fold gets (``messages``; None for
    a fold that never reads its message), and the indexes of the records without a time, in
    order (``process`` takes each of them, and says what is wrong with it)."""

    keys: list[Any]
    xs: list[float]
    messages: Sequence[Any] | None
    nulls: list[int]


def _columns_run(process_columns: Callable[..., int] | None, cols: RunColumns, i: int,
                 end: int) -> int:
    """``process_columns`` over records i..end-1, up to the first without a time."""
    assert process_columns is not None, "records as columns for an operator with no such loop"
    nulls = cols.nulls
    k = bisect_left(nulls, i)
    stop = nulls[k] if k < len(nulls) and nulls[k] < end else end
    return process_columns(cols.keys, cols.xs, cols.messages, i, stop)


def operator_run(op: Operator, downstream: list[Emit], meter: OpMeter | None,
                 read: dict[str, int], src: Cursor,
                 hold: Callable[[list[Awaitable[None]]], None], stream_id: str, *,
                 follow: Callable[[int], None] | None = None,
                 owner_fixed: bool = False, one_by_one: bool = False) -> BatchRun:
    """The run of ``stream_id`` into ``op`` (which gives lists of outputs, or awaitables of
    them), its outputs forwarded to ``downstream``; ``src.index`` follows the message being
    processed, and ``follow``, where given, is called with a message's index before
    ``process`` takes it. A message whose outputs go async stops the run: what it waits for
    goes to ``hold`` and its index is returned, for the hand-out loop to take it as in flight.
    ``owner_fixed``: the window's watermark stays with whoever owns it for the whole run (a
    Spark pass), so runs of messages apply with its own watermark too. ``one_by_one``: no runs
    (``src.index`` must name each message its outputs come from: records that carry their
    origins, ``runtime.engine.origins``).

    The run also takes ``cols`` (``RunColumns``), the batch's records as columns: its runs
    then go to ``op.process_columns``, and ``payloads[j]`` is made only where ``process``
    takes record j."""
    op_id = op.op_id
    clock = time.perf_counter_ns
    control_types = CONTROL_TYPES
    run = op.process_run
    columns = op.process_columns

    def batch(payloads: list[Any], i: int, end: int, times: Any = None,
              cols: RunColumns | None = None) -> int:
        start = i
        n_out = 0
        process: Callable[[Any], Any] = op.process
        timed = meter is None
        # runs of messages in one call, while the window's watermark is the runtime's (or
        # stays its own for the whole run)
        fast = run is not None and not one_by_one and (owner_fixed or not op.local_watermark)
        try:
            while i < end:
                if fast:
                    if timed:
                        j = (run(payloads, i, end, control_types)  # type: ignore[misc]
                             if cols is None else _columns_run(columns, cols, i, end))
                    else:  # the operator's time, over the whole run
                        t0 = clock()
                        j = (run(payloads, i, end, control_types)  # type: ignore[misc]
                             if cols is None else _columns_run(columns, cols, i, end))
                        meter.ns += clock() - t0  # type: ignore[union-attr]
                        meter.timed += j - i  # type: ignore[union-attr]
                        timed = j > i
                    if j > i:  # the message at j (if any) is for ``process``: it stopped there
                        i = src.index = j
                        if i == end:
                            break
                m = payloads[i]
                i += 1
                if type(m) is not KV and type(m) in control_types:
                    if _skipped(m, read, stream_id):
                        start += 1  # not counted in
                        continue
                    i -= 1  # not counted in either: the hand-out loop takes it
                    return i
                src.index = i
                if follow is not None:
                    follow(i - 1)
                if timed:
                    out = process(m)
                else:  # the operator's time, sampled on the batch's first message
                    out = _first_call(process, meter, None, m)
                    timed = True
                if out:
                    if type(out) is list:
                        n_out += len(out)
                        pend = forward(out, downstream)
                    else:  # an awaitable of outputs
                        pend = [continue_outputs(out if meter is None else counted(out, meter),
                                                 op_id, downstream)]
                    if pend:
                        hold(pend)
                        return i - 1
            return end
        except FailedAt as f:  # in a run (``process_run``, ``process_columns``)
            i = f.index + 1
            _fail(f.index, f.cause, op_id)
        except Exception as exc:
            _fail(i - 1, exc, op_id)
        finally:
            _count(meter, None, i - start, i - start - n_out)
    return batch
