"""``samza-dsl run --input``/``--sample`` into a job's inputs on the local log or on Kafka, and
``--skip``.

An input that already holds messages is never fed silently, nor silently left as it is:

- into an empty input the messages are loaded;
- ``--append`` adds them after what the input holds;
- ``--replace`` empties the input and starts the job over on it (checkpoints, stores,
  intermediate streams and changelogs are reset, as ``samza-dsl reset`` does; outputs stay);
  on Kafka a topic cannot be emptied from here, so it is an error there;
- a ``--sample N`` whose stream holds exactly the sample ``N`` an earlier run loaded is not
  loaded again, and the run says so (the demo run twice resumes);
- anything else is an error that names the stream, what it holds and both options.

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

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from runtime.host.jsonlines import JsonLines
from samza_dsl.config import did_you_mean
from samza_dsl.errors import SamzaError
from samza_dsl.jobconfig import job_config

__all__ = ["JsonLines", "feed_inputs", "parse_skips", "check_skips", "SAMPLES_FILE"]

#: in ``job.dir``: {stream id: [sample size, records the stream held after loading it]}
SAMPLES_FILE = "samples.json"


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


def _read_marks(root: str) -> dict[str, list[int]]:
    try:
        with open(os.path.join(root, SAMPLES_FILE), encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_marks(root: str, marks: Mapping[str, list[int]]) -> None:
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, SAMPLES_FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(dict(marks), f)
    os.replace(path + ".tmp", path)


def _plan_feeding(given: Mapping[str, Sequence[Any]], source: Mapping[str, str],
                  held: Mapping[str, int], marks: Mapping[str, list[int]], mode: str | None,
                  sample_n: int, job_name: str, where: str) -> tuple[list[str], list[str]]:
    """(streams to load, notes): the rules of the module doc, before anything is written."""
    load, notes, problems = [], [], []
    for sid in given:
        if not held[sid] or mode is not None:
            load.append(sid)
        elif source[sid] == "--sample" and marks.get(sid) == [sample_n, held[sid]]:
            notes.append(f"{sid} already holds the sample of {sample_n:,} that an earlier run "
                         f"loaded: not loaded again (--replace loads it anew and starts the job "
                         f"over, --append adds it once more)")
        else:
            problems.append(f"{source[sid]}: input {sid!r} of job {job_name!r} already holds "
                            f"{held[sid]:,} message(s) ({where})")
    if problems:
        n = sum(len(given[sid]) for sid in given)
        raise SamzaError(f"{'; '.join(problems)}. Say --append to add the {n:,} given message(s) "
                         f"after them, or --replace to empty the input and start the job over "
                         f"on the new input (its checkpoints, stores and intermediate streams are "
                         f"reset, as `samza-dsl reset` does; outputs stay)")
    return load, notes


def feed_inputs(app: Any, config: Mapping[str, Any], given: Mapping[str, Sequence[Any]],
                source: Mapping[str, str], mode: str | None, sample_n: int) -> list[str]:
    """Load ``given`` into the job's inputs (local log or Kafka) by the rules above; returns
    lines for standard error. ``source`` says which flag gave each stream's messages."""
    from runtime.kafka.job import uses_kafka

    if uses_kafka(app):
        return asyncio.run(_feed_kafka(app, config, given, source, mode, sample_n))
    return _feed_local(app, config, given, source, mode, sample_n)


def _feed_local(app: Any, config: Mapping[str, Any], given: Mapping[str, Sequence[Any]],
                source: Mapping[str, str], mode: str | None, sample_n: int) -> list[str]:
    from runtime.local.system import LocalJob
    from samza_dsl.config import validate_config

    job = LocalJob(app, validate_config(dict(config)), run=False)
    try:
        def held_now(sid: str) -> int:
            log = job.log_of(job.stream_system[sid])
            return sum(log.end_offset(job.physical[sid], p) for p in range(job.counts[sid]))

        held = {sid: held_now(sid) for sid in given}
        marks = _read_marks(job.root)
        load, notes = _plan_feeding(given, source, held, marks, mode, sample_n, job.job_name,
                                    f"in the local log of {job.root}")
        lock = None
        if mode == "replace":
            lock = job.job_lock()
            lock.exclusive("run --replace", f"replace the inputs of job {job.job_name!r}")
        try:
            if mode == "replace":
                gone = job._reset(outputs=False)
                for sid in given:
                    log = job.log_of(job.stream_system[sid])
                    log.delete_stream(job.physical[sid])
                    log.create(job.physical[sid], job.counts[sid])
                    gone.append(f"the {held[sid]:,} message(s) of input {sid}")
                notes.append(f"--replace: job {job.job_name} starts over; removed "
                             + "; ".join(gone))
            for sid in load:
                n = job.load(sid, given[sid])
                notes.append(f"loaded {n:,} message(s) into {sid}"
                             + (" after the ones it held" if mode == "append" and held[sid]
                                else ""))
                _mark(marks, sid, source[sid], sample_n, mode, held[sid], held_now(sid))
        finally:
            if lock is not None:
                lock.release()
        _write_marks(job.root, marks)
    finally:
        job.close()
    return notes


def _mark(marks: dict[str, list[int]], sid: str, source: str, sample_n: int, mode: str | None,
          before: int, after: int) -> None:
    """Note a stream that holds exactly the sample ``sample_n``; forget any other."""
    if source == "--sample" and (mode == "replace" or not before):
        marks[sid] = [sample_n, after]
    else:
        marks.pop(sid, None)


async def _feed_kafka(app: Any, config: Mapping[str, Any], given: Mapping[str, Sequence[Any]],
                      source: Mapping[str, str], mode: str | None, sample_n: int) -> list[str]:
    from runtime.host.jobdir import job_dir
    from runtime.kafka.load_dump import encode_load, kafka_held, kafka_streams, produce_load

    streams = await kafka_streams(app, config)
    if mode == "replace":
        raise SamzaError(f"--replace: the inputs of job {streams.job_name!r} are Kafka topics "
                         f"({', '.join(streams.physical[s] for s in given)}), which are not "
                         f"emptied from here; write the new input to a new topic (the stream's "
                         f"physical_name) and `samza-dsl reset` the job, or use --append")
    held = await kafka_held(streams, list(given))
    root = job_dir(streams.job_name, job_config(app, config))
    marks = _read_marks(root)
    load, notes = _plan_feeding(given, source, held, marks, mode, sample_n, streams.job_name,
                                f"in topics on {streams.servers}")
    # every message of every input is encoded before any is sent: a bad one loads nothing
    encoded = {sid: encode_load(streams, sid, given[sid], label=f"{source[sid]} message")
               for sid in load}
    loaded: list[str] = []
    for sid in load:
        try:
            n = await produce_load(streams, encoded[sid],
                                   load_command=f"samza-dsl load APP {sid}")
        except SamzaError as exc:
            _write_marks(root, marks)
            if not loaded:
                raise
            raise SamzaError(f"{'; '.join(loaded)} (all of it); then {exc}") from exc
        loaded.append(f"loaded {n:,} message(s) into {sid} (topic {streams.physical[sid]})")
        notes.append(loaded[-1])
        _mark(marks, sid, source[sid], sample_n, mode, held[sid],
              (await kafka_held(streams, [sid]))[sid])
    _write_marks(root, marks)
    return notes
