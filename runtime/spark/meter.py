"""Per-operator counts and times of a Spark pass: what ``ReprocessResult.operators`` reports.

Each operator of a pass has the streaming runtime's meter (``runtime.host.metrics.OpMeter``), and its
emit is the streaming chain's, metered as there (``runtime.engine.wiring.operator_emit``,
``runtime.engine.dag.metered``); a Spark task also meters an operator that passes every message on
(a ``send_to``, a ``merge``), as a run reports every operator.

Counts are exact. Time is read with ``time.perf_counter_ns``, which costs about 200 ns a read on
a virtual machine, twice the cost of a simple operator: so the per-message calls of an operator
are timed for one in ``HANDLE_SAMPLE``, and ``handle-ns`` scales their time to all its calls
(an estimate of the total, off by the spread of the call times). A Spark task's meter times an
operator's first message too, as a task may give an operator few: its count of messages in
starts at ``FIRST`` (``new_meter``) and is reported less that (``messages_in``). Calls that
take runs of messages (a line of operators, a re-keying) are timed whole; a window that takes
a batch's records in runs does so through the streaming task's batch run
(``runtime.engine.batch_operator.operator_run``), which times a batch's first run whole and its first record
taken alone, as in a task. Calls at window ticks, watermarks and end-of-stream are few and
timed every one, apart from the sampled ones (``control_ns``).

What is counted, by the names the streaming runtime uses (Samza's):

- ``messages-in``: messages handed to the operator (both sides of a join);
- ``messages-out``: what it gave downstream: outputs of ``process``, and of window ticks,
  watermarks and end-of-stream (a window's panes, and its late messages when it has ``late_to``);
- ``handle-ns``: nanoseconds spent in the operator's own function, not in the operators after it
  (per-message calls sampled, see above). An async call counts the time to start it, not the
  wait. A ``merge`` has no function of its own: its time is that of passing the message on;
- ``panes-emitted`` (windows): its messages out less the late messages it sent;
- ``late-messages-dropped`` (windows): taken from the window's own late counter
  (``operators.late``), as ``late_counts`` is; ``late-messages-sent`` with ``late_to``.
"""

from __future__ import annotations

from runtime.host.metrics import HANDLE_SAMPLE, OpMeter

__all__ = ["MESSAGES_IN", "MESSAGES_OUT", "HANDLE_NS", "PANES_EMITTED", "LATE_DROPPED",
           "LATE_SENT", "FIRST", "new_meter", "messages_in", "handle_ns", "meter_names",
           "add_run", "IN", "OUT", "NS", "PANES", "meter_report"]

MESSAGES_IN = "messages-in"
MESSAGES_OUT = "messages-out"
HANDLE_NS = "handle-ns"
PANES_EMITTED = "panes-emitted"
LATE_DROPPED = "late-messages-dropped"
LATE_SENT = "late-messages-sent"

#: the columns of a ``meter_report`` (``PassExecutor.meters``)
IN, OUT, NS, PANES = 0, 1, 2, 3

#: where a Spark task's meter starts counting messages in: ``runtime.engine.dag.metered`` times the
#: call that brings the count to a multiple of ``HANDLE_SAMPLE``, so the first one is timed
FIRST = HANDLE_SAMPLE - 1


def new_meter(op_id: str, task: str) -> OpMeter:
    """The meter of operator ``op_id`` in Spark task ``task`` (see ``FIRST``)."""
    meter = OpMeter(op_id, task)
    meter.n_in = FIRST
    return meter


def messages_in(meter: OpMeter) -> int:
    return meter.n_in - FIRST


def add_run(meter: OpMeter, calls: int, ns: int) -> None:
    """Counts ``calls`` messages in, taken in ``ns`` nanoseconds (every one timed)."""
    meter.n_in += calls
    meter.ns += ns
    meter.timed += calls


def handle_ns(meter: OpMeter, control_ns: int = 0) -> int:
    """The operator's time: its per-message calls' timed time scaled to all of them, and
    ``control_ns``, its calls at ticks, watermarks and end-of-stream."""
    calls = messages_in(meter)
    return (meter.ns * calls // meter.timed if meter.timed else 0) + control_ns


def meter_names(meter: OpMeter, control_ns: int = 0) -> dict[str, int]:
    """A meter by metric name (a window's ``panes-emitted`` is counted on the driver, from its
    messages out and its late messages sent)."""
    return {MESSAGES_IN: messages_in(meter), MESSAGES_OUT: meter.n_out,
            HANDLE_NS: handle_ns(meter, control_ns)}


def meter_report(meter: OpMeter, control_ns: int, late_sent: int, window: bool) -> list[int]:
    """``[messages in, messages out, handle ns, panes emitted]`` of ``meter``: a window's
    panes are its outputs less the ``late_sent`` late messages it sent (0 but for a window)."""
    out = meter.n_out
    return [messages_in(meter), out, handle_ns(meter, control_ns),
            out - late_sent if window else 0]
