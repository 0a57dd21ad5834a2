"""``samza-dsl run --input``/``--sample`` into a job's inputs on the local log or on Kafka, and
``--skip``.

An input that already holds messages is never fed silently, nor silently left as it is: the
rules are ``runtime.engine.feeding``'s, and each system's ``JobSystem.feed`` loads by them.

``--skip STREAM:PARTITION:OFFSET`` passes over one record of an input or intermediate stream in
this run: it is not decoded nor processed, counts as processed (the checkpoint goes past it), and
is logged and counted (``skipped-by-request``). A record of an intermediate stream counts as
applied where it came from (its origin, ``runtime.engine.origins``): a copy of it that the
upstream task writes again as it replays is skipped too. A stream the job does not have, or a
partition the stream does not have, is an error before anything runs; a record the run will not
reach (at or behind the checkpoint, or past the end of an input's partition) is a warning that
says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runtime.engine.feeding import SAMPLES_FILE
from runtime.engine.systems import job_system
from runtime.host.jsonlines import JsonLines
from samza_dsl.config import did_you_mean
from samza_dsl.errors import SamzaError

__all__ = ["JsonLines", "feed_inputs", "parse_skips", "check_skips", "SAMPLES_FILE"]



def parse_skips(pairs: Sequence[str], inputs: Mapping[str, Any],
                intermediates: Mapping[str, Any] | None = None
                ) -> dict[str, dict[int, set[int]]]:
    """``STREAM:PARTITION:OFFSET`` values -> {stream id: {partition: {offsets}}}. A stream is an
    input or one of the ``intermediates`` (a record written by ``partition_by``, as the error of
    a function that failed after the hop names it)."""
    out: dict[str, dict[int, set[int]]] = {}
    inter = intermediates or {}
    for pair in pairs:
        sid, _, rest = pair.rpartition(":")
        sid, _, part = sid.rpartition(":")
        try:
            partition, offset = int(part), int(rest)
        except ValueError:
            partition = offset = -1
        if not sid or partition < 0 or offset < 0:
            raise SamzaError(f"--skip takes STREAM:PARTITION:OFFSET (an input or intermediate "
                             f"stream, and whole numbers >= 0 as `samza-dsl dump APP STREAM "
                             f"--offsets` prints them), got {pair!r}")
        if sid not in inputs and sid not in inter:
            known = {**inputs, **inter}
            also = f"; intermediate streams: {', '.join(sorted(inter))}" if inter else ""
            raise SamzaError(f"--skip {pair}: {sid!r} is not an input nor an intermediate stream"
                             f"{did_you_mean(sid, known)}; inputs: {', '.join(sorted(inputs))}"
                             f"{also}")
        declared = inputs[sid].partitions if sid in inputs else None
        if isinstance(declared, int) and partition >= declared:
            raise SamzaError(_no_partition(pair, sid, declared))
        out.setdefault(sid, {}).setdefault(partition, set()).add(offset)
    return out


def _no_partition(pair: str, sid: str, count: int, kind: str = "input") -> str:
    return (f"--skip {pair}: {kind} {sid!r} has {count} partition(s), 0 to {count - 1}; give the "
            f"partition and offset of the record as `samza-dsl dump APP {sid} --offsets` prints "
            f"them, or as the job's error named them")


def check_skips(skip: Mapping[str, Mapping[int, set[int]]], job: Any,
                ends: Mapping[tuple[str, int], int] | None, *, follow: bool) -> list[str]:
    """The ``--skip`` records against the job about to run (``job``: a ``LocalJob`` or
    ``KafkaJob``, with its partition ``counts``, its ``job`` model and its ``checkpoints``):
    an error for a partition an input does not have, and a warning for each record this run
    will not pass over, saying why. ``ends``: the end offset of each partition named (None: not
    known)."""
    from runtime.engine.job import SSP

    for sid, parts in sorted(skip.items()):
        count = job.counts.get(sid)
        for p in sorted(parts):
            if count is not None and p >= count:
                kind = "input" if sid in job.plan.input_streams else "intermediate stream"
                raise SamzaError(_no_partition(f"{sid}:{p}:{min(parts[p])}", sid, count, kind))
    cps = job.checkpoints.tasks()
    notes = []
    for sid, parts in sorted(skip.items()):
        for p, offsets in sorted(parts.items()):
            ssp = SSP(sid, p)
            # the last offset processed in the partition: the least of its (virtual) tasks'
            # checkpoints, None when one of them has none
            done = [cps.get(t.name, {}).get(ssp) for t in job.job.tasks if ssp in t.ssps]
            behind = min(done) if done and None not in done else None
            end = ends.get((sid, p)) if ends is not None else None
            for o in sorted(offsets):
                what = f"--skip {sid}:{p}:{o}"
                if behind is not None and o <= behind:
                    notes.append(f"{what} not applied: an earlier run processed it (the "
                                 f"checkpoint of {sid}[{p}] is at offset {behind}, the last one "
                                 f"processed); this run starts after it")
                elif end is not None and o >= end:
                    held = f"ends at offset {end - 1}" if end else "is empty"
                    if sid not in job.plan.input_streams:  # the job writes it as it runs
                        notes.append(f"{what} not applied yet: partition {p} of intermediate "
                                     f"stream {sid} {held}; the record is passed over if the "
                                     f"job writes it in this run")
                    elif follow:
                        notes.append(f"{what} not applied yet: partition {p} of {sid} {held}; "
                                     f"the record is passed over if it comes while this run "
                                     f"follows the input")
                    else:
                        notes.append(f"{what} not applied: partition {p} of {sid} {held}, "
                                     f"where this run stops reading; see its records with "
                                     f"`samza-dsl dump APP {sid} --offsets`")
    return notes


def feed_inputs(app: Any, config: Mapping[str, Any], given: Mapping[str, Sequence[Any]],
                source: Mapping[str, str], mode: str | None, sample_n: int) -> list[str]:
    """Load ``given`` into the job's inputs (local log or Kafka) by the rules of
    ``runtime.engine.feeding``; returns lines for standard error. ``source`` says which flag gave
    each stream's messages."""
    return job_system(app).job_system().feed(app, config, given, source, mode, sample_n)
