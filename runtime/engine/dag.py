"""Compiles a task's operators into plain closures: one call per message runs the synchronous
part of its whole sub-DAG inline and returns ``None``, or returns the awaitables still pending.

A message whose sub-DAG is all synchronous therefore completes with no Task or Future created
(docs/architecture.md, "One message, from consumer to producer and to the checkpoint")."""

from __future__ import annotations

import asyncio
import os
import sysconfig
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from runtime.host.metrics import HANDLE_SAMPLE, OpMeter

__all__ = ["Emit", "OperatorFailure", "OneToOneChain", "chain", "chain_one", "fan_out",
           "gather_pending", "metered", "user_frame", "forward", "continue_outputs", "counted"]

#: an emit function: message -> None (done) or a list of pending awaitables
Emit = Callable[[Any], list[Awaitable[None]] | None]


class OperatorFailure(Exception):
    """A user function or operator raised; carries the operator id for the task's error."""

    def __init__(self, op_id: str, cause: BaseException) -> None:
        super().__init__(f"{op_id}: {type(cause).__name__}: {cause}")
        self.op_id = op_id
        self.cause = cause
        #: where the message it failed on was, in a batch run by tags (``PassExecutor.line``)
        self.tag: int | None = None

    @property
    def reason(self) -> str:
        """The cause as an error shows it, with a hint where the cause is a known mistake."""
        text = f"{type(self.cause).__name__}: {self.cause}"
        if isinstance(self.cause, TypeError) and str(self.cause).startswith("unhashable type"):
            text += (" (a key of a table, a window or a join must be hashable, as every store "
                     "keeps them in a dict: use a tuple instead of a list, or a str)")
        return text

    @property
    def where(self) -> str | None:
        """``parse() at app.py:12``: the innermost frame of the application's own code in the
        cause's traceback (None when none is there)."""
        return user_frame(self.cause.__traceback__)


def _not_user_dirs() -> tuple[str, ...]:
    """Directories whose code is not the application's: samza-dsl's packages, the standard
    library and installed packages."""
    import operators
    import planner
    import runtime
    import samza_dsl

    dirs = {os.path.dirname(m.__file__ or "") for m in (operators, planner, runtime, samza_dsl)}
    paths = sysconfig.get_paths()
    dirs.update(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)
    return tuple(os.path.realpath(d) + os.sep for d in dirs if d)


_NOT_USER: tuple[str, ...] | None = None


def user_frame(tb: TracebackType | None) -> str | None:
    """``func() at path:line`` of the innermost traceback frame in the application's own code
    (not samza-dsl's, the standard library's or an installed package's); the path is relative
    to the working directory when it is under it. None: no such frame."""
    global _NOT_USER
    if _NOT_USER is None:
        _NOT_USER = _not_user_dirs()
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        path = os.path.realpath(code.co_filename)
        if not code.co_filename.startswith("<") and not path.startswith(_NOT_USER):
            found = (code.co_qualname, path, tb.tb_lineno)
        tb = tb.tb_next
    if found is None:
        return None
    name, path, line = found
    cwd = os.getcwd() + os.sep
    shown = path[len(cwd):] if path.startswith(cwd) else path
    return f"{name}() at {shown}:{line}"


async def gather_pending(pending: list[Awaitable[None]]) -> None:
    if len(pending) == 1:
        await pending[0]
    else:
        await asyncio.gather(*pending)


def forward(outs: list[Any], nexts: list[Emit]) -> list[Awaitable[None]] | None:
    pend: list[Awaitable[None]] | None = None
    for o in outs:
        for nxt in nexts:
            p = nxt(o)
            if p is not None:
                if pend is None:
                    pend = p
                else:
                    pend.extend(p)
    return pend


async def continue_outputs(awaitable: Awaitable[list[Any]], op_id: str, nexts: list[Emit]) -> None:
    try:
        outs = await awaitable
    except OperatorFailure:
        raise
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        raise OperatorFailure(op_id, exc) from exc
    if outs:
        pend = forward(list(outs), nexts)
        if pend is not None:
            await gather_pending(pend)


def metered(fn: Callable[[Any], Any], meter: OpMeter, one: bool) -> Callable[[Any], Any]:
    """``fn`` counted by ``meter``: messages in, outputs (``one``: a one-to-one function, whose
    None is no output; else a list, or an awaitable of one), and the time of one call in
    ``HANDLE_SAMPLE``. The time is the function's own: what runs downstream is not in it."""
    clock = time.perf_counter_ns
    mask = HANDLE_SAMPLE - 1
    if one:
        def run_one(m: Any) -> Any:
            n = meter.n_in = meter.n_in + 1
            if n & mask:
                r = fn(m)
            else:
                t = clock()
                r = fn(m)
                meter.ns += clock() - t
                meter.timed += 1
            if r is not None:
                meter.n_out += 1
            return r
        return run_one

    def run(m: Any) -> Any:
        n = meter.n_in = meter.n_in + 1
        if n & mask:
            r = fn(m)
        else:
            t = clock()
            r = fn(m)
            meter.ns += clock() - t
            meter.timed += 1
        if type(r) is list:
            meter.n_out += len(r)
            return r
        return counted(r, meter)
    return run


async def counted(awaitable: Awaitable[list[Any]], meter: OpMeter) -> list[Any]:
    # counted from here, not where the call returned: a coroutine never awaited (its task
    # failed) runs no finally, and would stay in flight for ever
    meter.in_flight += 1
    try:
        outs = await awaitable
    finally:
        meter.in_flight -= 1
    if outs:
        meter.n_out += len(outs)
    return outs


def chain(op_id: str, process: Callable[[Any], Any], nexts: list[Emit]) -> Emit:
    """The emit function of one operator followed by ``nexts``."""
    if not nexts:
        def emit_terminal(m: Any) -> list[Awaitable[None]] | None:
            try:
                out = process(m)
            except OperatorFailure:
                raise
            except Exception as exc:
                raise OperatorFailure(op_id, exc) from exc
            if type(out) is list:
                return None
            return [continue_outputs(out, op_id, nexts)]
        return emit_terminal

    if len(nexts) == 1:
        nxt = nexts[0]

        def emit_one(m: Any) -> list[Awaitable[None]] | None:
            try:
                out = process(m)
            except OperatorFailure:
                raise
            except Exception as exc:
                raise OperatorFailure(op_id, exc) from exc
            if type(out) is list:
                if not out:
                    return None
                if len(out) == 1:
                    return nxt(out[0])
                return forward(out, nexts)
            return [continue_outputs(out, op_id, nexts)]
        return emit_one

    def emit_many(m: Any) -> list[Awaitable[None]] | None:
        try:
            out = process(m)
        except OperatorFailure:
            raise
        except Exception as exc:
            raise OperatorFailure(op_id, exc) from exc
        if type(out) is list:
            return forward(out, nexts) if out else None
        return [continue_outputs(out, op_id, nexts)]
    return emit_many


def chain_one(op_id: str, fn: Callable[[Any], Any], nexts: list[Emit],
              identity: Callable[[Any], Any] | None = None) -> Emit:
    """The emit function of an operator that gives at most one output per message
    (``Operator.one_to_one``): no list per message, and an identity operator costs nothing."""
    nxt = fan_out(nexts) if nexts else None
    if fn is identity and nxt is not None:
        return nxt

    if nxt is None:
        def emit_last(m: Any) -> list[Awaitable[None]] | None:
            try:
                fn(m)
            except Exception as exc:
                raise OperatorFailure(op_id, exc) from exc
            return None
        return emit_last

    def emit(m: Any) -> list[Awaitable[None]] | None:
        try:
            r = fn(m)
        except Exception as exc:
            raise OperatorFailure(op_id, exc) from exc
        if r is None:
            return None
        return nxt(r)
    return emit


class OneToOneChain:
    """Synchronous one-to-one functions in a row (map, filter, a join's port...) as one
    function for a loop over a batch: ``call(m)`` is the last one's output, or None where one
    of them gave None. A function that raises raises ``OperatorFailure`` naming its operator.
    Each operator's meter is counted per batch (``flush``): its messages in are those that
    reached it, its messages out those that reached the next; ``call_timed`` also times each
    function (a batch's sample)."""

    __slots__ = ("ops", "fns", "meters", "reached", "call", "_perf")

    def __init__(self, ops: list[tuple[str, Callable[[Any], Any]]],
                 meters: list[OpMeter | None]) -> None:
        self.ops = [op_id for op_id, _ in ops]
        self.fns = [fn for _, fn in ops]
        self.meters = meters
        #: messages that reached each function, and (last) that came out of the chain
        self.reached = [0] * (len(ops) + 1)
        self._perf = time.perf_counter_ns
        fns, reached, ids, n = self.fns, self.reached, self.ops, len(ops)

        def call(m: Any) -> Any:
            k = -1
            try:
                for fn in fns:
                    k += 1
                    reached[k] += 1
                    m = fn(m)
                    if m is None:
                        return None
            except Exception as exc:
                raise OperatorFailure(ids[k], exc) from exc
            reached[n] += 1
            return m
        self.call = call

    def call_timed(self, m: Any) -> Any:
        """``call``, with each function's time added to its meter."""
        reached, perf = self.reached, self._perf
        for k, fn in enumerate(self.fns):
            reached[k] += 1
            t0 = perf()
            try:
                m = fn(m)
            except Exception as exc:
                raise OperatorFailure(self.ops[k], exc) from exc
            meter = self.meters[k]
            if meter is not None:
                meter.ns += perf() - t0
                meter.timed += 1
            if m is None:
                return None
        reached[-1] += 1
        return m

    def flush(self) -> None:
        """Add the counts since the last flush to the meters."""
        reached = self.reached
        for k, meter in enumerate(self.meters):
            if meter is not None:
                meter.n_in += reached[k]
                meter.n_out += reached[k + 1]
        reached[:] = [0] * len(reached)


def fan_out(emits: list[Emit]) -> Emit:
    """One message to several consumers."""
    if len(emits) == 1:
        return emits[0]

    def emit(m: Any) -> list[Awaitable[None]] | None:
        pend: list[Awaitable[None]] | None = None
        for e in emits:
            p = e(m)
            if p is not None:
                if pend is None:
                    pend = p
                else:
                    pend.extend(p)
        return pend
    return emit
