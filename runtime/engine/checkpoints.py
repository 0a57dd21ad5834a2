"""The checkpoint record every checkpoint store writes: a task's input offsets and its stores'
changelog positions, merged with the task's previous checkpoint (a task may checkpoint some of
its partitions only), and when it was written (``written``, milliseconds since the epoch, for
``samza-dsl status``; checkpoints written before it existed have none, and read the same).

A checkpoint written by a member of a consumer group also names the group generation it was
written in (``group_generation``) and the member (``member``), and carries the task's ``epoch``:
each member that takes a task over writes its checkpoint again with the epoch one higher before
it reads the task's inputs. A reader ignores a task's checkpoint of an epoch lower than one it
read before it (``supersedes``), so a member fenced out of its group cannot move a task's
checkpoint (``runtime.kafka.fence``). The epoch, not the group generation, decides: a group's
generation starts over when the broker deletes an empty group.

A task with event time also records its progress as of the checkpointed offsets (``times``:
``runtime.engine.watermarks.TaskClock.snapshot``), which a restore starts from; a checkpoint without
it (written before it existed) restores with no progress, as before.

A task that writes outputs through sinks (``runtime.engine.sinks``) records the id of the checkpoint
and each sink's position (``sinks``: ``{"id": n, "positions": {stream: position}}``), which the
task's next start hands back to its sinks; a checkpoint without it restores none.

At least once, a task reading intermediate streams records what it applied of each origin of
their records (``applied``: ``runtime.engine.origins``), which its next start skips again."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import msgspec

from runtime.engine.job import SSP

__all__ = ["merge", "offsets_of", "changelogs_of", "times_of", "sinks_of", "applied_of", "written_of", "epoch_of",
           "supersedes", "encode", "decode"]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


def merge(old: Mapping[str, Any], offsets: Mapping[SSP, int],
          changelogs: Mapping[str, int] | None,
          stamp: Mapping[str, Any] | None = None, times: Any = None,
          sinks: Mapping[str, Any] | None = None,
          applied: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``old`` with ``offsets`` and ``changelogs`` written over it, stamped with the time now
    and ``stamp`` (a group member's ``group_generation`` and ``member``; ``epoch`` when it takes
    the task over), keeping ``old``'s epoch otherwise; and the task's event-time progress as of
    ``offsets`` (``times``: ``TaskClock.snapshot``), else ``old``'s; and its sinks' record
    (``sinks``, ``runtime.engine.sinks``), else ``old``'s; and what it applied of the records
    of its intermediate streams (``applied``, ``runtime.engine.origins``), else ``old``'s."""
    merged = {(s, p): o for s, p, o in old.get("offsets", [])}
    merged.update({(ssp.stream_id, ssp.partition): o for ssp, o in offsets.items()})
    cls = dict(old.get("changelogs", {}))
    cls.update(changelogs or {})
    out = {"offsets": [[s, p, o] for (s, p), o in sorted(merged.items())], "changelogs": cls,
           "written": int(time.time() * 1000)}
    if "epoch" in old:
        out["epoch"] = epoch_of(old)
    times = times if times is not None else old.get("times")
    if times is not None:
        out["times"] = times
    sinks = sinks if sinks is not None else old.get("sinks")
    if sinks is not None:
        out["sinks"] = dict(sinks)
    applied = applied if applied is not None else old.get("applied")
    if applied is not None:
        out["applied"] = dict(applied)
    if stamp:
        out.update(stamp)
    return out


def offsets_of(data: Mapping[str, Any]) -> dict[SSP, int]:
    return {SSP(s, p): o for s, p, o in data.get("offsets", [])}


def changelogs_of(data: Mapping[str, Any]) -> dict[str, int]:
    return dict(data.get("changelogs", {}))


def times_of(data: Mapping[str, Any]) -> Any:
    """The task's event-time progress as of its checkpoint (``TaskClock.snapshot``); None for
    a checkpoint without it."""
    return data.get("times")


def sinks_of(data: Mapping[str, Any]) -> dict[str, Any]:
    """The task's sinks' record (``{"id": n, "positions": {...}}``); {} for a checkpoint
    without it."""
    sinks = data.get("sinks")
    return dict(sinks) if isinstance(sinks, dict) else {}


def applied_of(data: Mapping[str, Any]) -> dict[str, Any]:
    """What the task applied of its intermediate streams' records as of its checkpoint
    (``runtime.engine.origins.Applied.snapshot``); {} for a checkpoint without it."""
    applied = data.get("applied")
    return dict(applied) if isinstance(applied, dict) else {}


def written_of(data: Mapping[str, Any]) -> float | None:
    """When the checkpoint was written, in seconds since the epoch; None for a checkpoint written
    before checkpoints recorded it."""
    ms = data.get("written")
    return ms / 1000.0 if isinstance(ms, int | float) and not isinstance(ms, bool) else None


def epoch_of(data: Mapping[str, Any] | None) -> int:
    """A task's epoch in its checkpoint: how many times a group's member took it over (0: never,
    or a checkpoint from before checkpoints carried it)."""
    e = (data or {}).get("epoch")
    return e if isinstance(e, int) and not isinstance(e, bool) else 0


def supersedes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether a task's checkpoint ``new``, read after ``old``, replaces it: unless its epoch is
    lower (written by a member fenced out of the group since another took the task over)."""
    return old is None or epoch_of(new) >= epoch_of(old)


def encode(data: Mapping[str, Any]) -> bytes:
    return _encoder.encode(data)


def decode(raw: bytes) -> dict[str, Any]:
    """Raises msgspec.DecodeError on bytes that are not a checkpoint."""
    data = _decoder.decode(raw)
    return data if isinstance(data, dict) else {}
