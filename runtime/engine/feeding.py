"""The rules by which ``samza-dsl run --input``/``--sample`` feed a job's inputs, on every
system whose streams outlive a run (``runtime.run_inputs``; each system's ``JobSystem.feed``
does the loading).

An input that already holds messages is never fed silently, nor silently left as it is:

- into an empty input the messages are loaded;
- ``--append`` adds them after what the input holds;
- ``--replace`` empties the input and starts the job over on it (checkpoints, stores,
  intermediate streams and changelogs are reset, as ``samza-dsl reset`` does; outputs stay);
  on Kafka a topic cannot be emptied from here, so it is an error there;
- a ``--sample N`` whose stream holds exactly the sample ``N`` an earlier run loaded is not
  loaded again, and the run says so (the demo run twice resumes);
- anything else is an error that names the stream, what it holds and both options.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from samza_dsl.errors import SamzaError

__all__ = ["SAMPLES_FILE", "read_marks", "write_marks", "plan_feeding", "mark"]

#: in ``job.dir``: {stream id: [sample size, records the stream held after loading it]}
SAMPLES_FILE = "samples.json"


def read_marks(root: str) -> dict[str, list[int]]:
    try:
        with open(os.path.join(root, SAMPLES_FILE), encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def write_marks(root: str, marks: Mapping[str, list[int]]) -> None:
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, SAMPLES_FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(dict(marks), f)
    os.replace(path + ".tmp", path)


def plan_feeding(given: Mapping[str, Sequence[Any]], source: Mapping[str, str],
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


def mark(marks: dict[str, list[int]], sid: str, source: str, sample_n: int, mode: str | None,
          before: int, after: int) -> None:
    """Note a stream that holds exactly the sample ``sample_n``; forget any other."""
    if source == "--sample" and (mode == "replace" or not before):
        marks[sid] = [sample_n, after]
    else:
        marks.pop(sid, None)
