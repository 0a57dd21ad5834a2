"""The lines ``samza-dsl run`` prints after a run: where it resumed, what came in, what went out,
what was late and why, and what to do when nothing was new."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from operators.late import AFTER_END
from runtime.engine.late import window_ids
from runtime.host.jobdir import dead_letter_stream
from samza_dsl.connectors import SinkOutput

__all__ = ["resume_lines", "traffic_lines", "skipped_lines", "skipped_per_input", "LATE_WHY",
           "late_why_lines", "print_outputs"]

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
        policy = plan.config.stream(sid).serde_error
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


def _output_counts(runner: Any) -> dict[str, int]:
    """Messages this run wrote per output: its producers' counts; in memory, where the outputs
    are held anyway, their lengths."""
    from runtime.engine.sinks import sink_outputs

    sinks = sink_outputs(runner.plan)
    written = runner.written()
    if written is not None:
        counts = {sid: written.get(sid, 0) for sid in runner.plan.output_streams}
    else:
        counts = {sid: len(runner.messages(sid)) if sid not in sinks else 0
                  for sid in runner.plan.output_streams}
    if sinks and runner.container is not None:  # written by sinks: as the tasks counted them
        for task_sinks in runner.container.committer.sinks.values():
            for sid, n in task_sinks.written.items():
                counts[sid] += n
    return counts


def print_outputs(runner: Any, out: TextIO = sys.stdout, limit: int = 10,
                  fmt: Callable[[Any], str] = repr, app_ref: str | None = None) -> None:
    """The run's summary: where it resumed, each output's count of messages this run wrote
    (counted as they were written) and its last ``limit`` ones (read from its end), what came in
    and went out, and the late messages of its windows (how many, where they went, and why)."""
    traffic = runner._traffic()
    if traffic is not None:
        for line in resume_lines(traffic[1], runner.plan):
            out.write(line + "\n")
    counts = _output_counts(runner)
    sinks = {sid: d.what for sid, d in runner.plan.app.outputs.items()
             if isinstance(d, SinkOutput) and d.sink is not None}
    for sid in runner.plan.output_streams:
        if sid in sinks:  # written by a sink (samza_dsl.connectors): nothing to read back
            out.write(f"{sid}: {counts[sid]} message(s) to {sinks[sid]}\n")
            continue
        shown = runner.tail(sid, limit)
        out.write(f"{sid}: {counts[sid]} message(s)\n")
        for m in shown:
            out.write(f"  {fmt(m)}\n")
        if counts[sid] > len(shown):
            out.write(f"  ... {counts[sid] - len(shown)} more, not shown\n")
    if traffic is not None:
        read, restored, counters = traffic
        for line in traffic_lines(read, counts, runner.plan, resumed=any(restored.values()),
                                  app_ref=app_ref,
                                  skipped=skipped_per_input(counters, runner.plan)):
            out.write(line + "\n")
        for line in skipped_lines(counters, runner.plan, app_ref=app_ref):
            out.write(line + "\n")
    if window_ids(runner.plan):
        lines = runner.late_summary() or ["late: no late messages"]
        if runner.late():
            lines += late_why_lines(
                runner.late_counts, runner.plan,
                counters=traffic[2] if traffic is not None else None,
                app_ref=app_ref or "APP")
        for line in lines:
            out.write(line + "\n")
