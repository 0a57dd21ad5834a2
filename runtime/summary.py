"""The lines ``samza-dsl run`` prints after a run: where it resumed, what came in, what went out,
what was late and why, and what to do when nothing was new."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.late import AFTER_END
from runtime.host.jobdir import dead_letter_stream

__all__ = ["resume_lines", "traffic_lines", "skipped_lines", "skipped_per_input", "LATE_WHY",
           "late_why_lines"]

#: why a message is late, for a summary that counts some
LATE_WHY = ("late: a message is late when the watermark (the event time its input has reached, "
            "less max_out_of_orderness) had passed the end of its window, plus the window's "
            "allowed lateness (for an event-time join: the message's own event time), before it "
            "came; declare max_out_of_orderness beside event_time (on the input or the window) "
            "to wait longer, or late_to= to keep them")


def late_why_lines(late: Mapping[str, Mapping[str, int]], plan: Any, *,
                   counters: Mapping[str, Any] | None = None,
                   app_ref: str = "APP") -> list[str]:
    """Why the run's late messages were late: for panes that the end of an earlier bounded run
    closed (more input after it ended, at the same event times), else disorder beyond the
    declared bound. (Replays never are: a task skips a replayed record of an intermediate stream
    before any window sees it, ``runtime.engine.origins``.)"""
    total = sum(n for per in late.values() for n in per.values())
    after_end = sum(int(v) for k, v in (counters or {}).items()
                    if isinstance(k, str) and k.endswith(AFTER_END))
    if after_end:
        line = (f"late: {after_end:,} of them came for panes that the end of an earlier bounded "
                f"run had closed: a bounded run ends by closing every open pane, and event time "
                f"is complete up to there, so more input at those times is late, never a pane "
                f"emitted twice. To count it with the rest, start over (samza-dsl reset "
                f"{app_ref} --outputs) and run over all the input; or keep the job running "
                f"with --follow (see 'The end of a bounded run' in docs/semantics.md)")
        if after_end >= total:
            return [line]
        return [line, LATE_WHY]
    return [LATE_WHY] if late else []


def _inputs(plan: Any) -> list[str]:
    return [sid for sid in plan.input_streams]


def resume_lines(restored: Mapping[str, Mapping[Any, int]], plan: Any) -> list[str]:
    """Where a run resumed: the input offsets of the checkpoint it started after."""
    inputs = set(_inputs(plan))
    at = sorted((str(ssp), off) for cps in restored.values() for ssp, off in cps.items()
                if ssp.stream_id in inputs)
    if not at:
        return []
    shown = ", ".join(f"{ssp}@{off}" for ssp, off in at[:8])
    more = f" and {len(at) - 8} more" if len(at) > 8 else ""
    return [f"resumed after the checkpoint of an earlier run: {shown}{more} (the last offset "
            f"processed in each input partition)"]


def skipped_per_input(counters: Mapping[str, Any], plan: Any) -> dict[str, int]:
    """The new records of each input this run read and passed over: named by --skip, or failing
    to deserialize or dated too far ahead (``max_event_time_ahead``) under the ``skip`` or
    ``dead-letter`` policy (``runtime.engine.codec``'s and ``runtime.engine.event_time_ahead``'s counters)."""
    out = {}
    for sid in _inputs(plan):
        n = int(counters.get(f"{sid}.skipped-by-request", 0)) \
            + int(counters.get(f"{sid}.serde-errors-skipped", 0)) \
            + int(counters.get(f"{sid}.event-time-ahead-skipped", 0))
        if n:
            out[sid] = n
    return out


def skipped_lines(counters: Mapping[str, Any], plan: Any, *, app_ref: str | None) -> list[str]:
    """``skipped:`` lines: the records passed over by request, and per input those that did not
    deserialize, with where each can be found."""
    lines = []
    by_request = int(counters.get("skipped-by-request", 0))
    if by_request:
        lines.append(f"skipped: {by_request:,} record(s) as --skip asked (not processed; the "
                     f"checkpoint is past them)")
    replays = int(counters.get("replays-skipped", 0))
    if replays:
        lines.append(f"skipped: {replays:,} record(s) of intermediate streams that tasks "
                     f"restarting from their checkpoints wrote again, already applied (see "
                     f"'Replays applied once' in docs/semantics.md)")
    app = app_ref or "APP"
    for sid in plan.streams:
        key = f"streams.{sid}.samza.serde.error"
        policy = plan.config.get(key)
        dead = (f"they are in the dead-letter stream, with each one's error and origin: "
                f"`samza-dsl dump {app} {dead_letter_stream(plan.job_name)}`"
                if policy == "dead-letter" else "")
        n = int(counters.get(f"{sid}.serde-errors-skipped", 0))
        if n:
            where = dead or "each is logged above with its partition, offset and error"
            lines.append(f"skipped: {n:,} record(s) of {sid} that did not deserialize ({key}="
                         f"{policy}): not processed; {where}")
        n = int(counters.get(f"{sid}.event-time-ahead-skipped", 0))
        if n:
            where = dead or "the first is logged above with its partition, offset and event time"
            lines.append(f"skipped: {n:,} message(s) of {sid} whose event time was too far "
                         f"ahead of the wall clock (max_event_time_ahead; {key}={policy}): not "
                         f"processed, the watermark did not move to them; {where}")
    return lines


def traffic_lines(read: Mapping[str, int], outputs: Mapping[str, int], plan: Any, *,
                  resumed: bool, app_ref: str | None,
                  skipped: Mapping[str, int] | None = None) -> list[str]:
    """``in:`` (user messages read per input and intermediate stream, and the new records read
    and skipped: ``skipped_per_input``), ``out:`` (messages written per output) and, when a run
    read nothing new, what to do."""
    lines = []
    inputs = _inputs(plan)
    total_in = sum(read.get(sid, 0) for sid in inputs)
    passed = sum((skipped or {}).values())
    parts = [f"{read.get(sid, 0):,} from {sid}" for sid in inputs]
    also = f"; {passed:,} more new record(s) read and skipped (below)" if passed else ""
    lines.append(f"in: {total_in:,} new message(s) ({', '.join(parts) or 'no inputs'}){also}")
    between = [(sid, n) for sid, n in sorted(read.items())
               if sid not in inputs and plan.streams[sid].kind in ("intermediate", "broadcast")]
    if between:
        lines.append("through: " + ", ".join(f"{n:,} via {sid}" for sid, n in between))
    outs = ", ".join(f"{n:,} to {sid}" for sid, n in outputs.items())
    lines.append(f"out: {sum(outputs.values()):,} message(s) ({outs or 'no outputs'})")
    if total_in == 0 and not passed and inputs:
        app = app_ref or "APP"
        first = inputs[0]
        why = ("every input was processed up to its end by an earlier run" if resumed
               else "the inputs are empty")
        lines.append(f"nothing new: {why}. See what a stream holds with `samza-dsl dump {app} "
                     f"{first}`; add messages with `samza-dsl load {app} {first} FILE.jsonl` or "
                     f"`samza-dsl run {app} --input {first}=FILE.jsonl --append`; or process "
                     f"everything again after `samza-dsl reset {app} --outputs`")
    return lines
