"""The checkpoint record every checkpoint store writes: a task's input offsets and its stores'
changelog positions, merged with the task's previous checkpoint (a task may checkpoint some of
its partitions only), and when it was written (``written``, milliseconds since the epoch, for
``samza-dsl status``; checkpoints written before it existed have none, and read the same)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import msgspec

from runtime.job import SSP

__all__ = ["merge", "offsets_of", "changelogs_of", "written_of", "encode", "decode"]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


def merge(old: Mapping[str, Any], offsets: Mapping[SSP, int],
          changelogs: Mapping[str, int] | None) -> dict[str, Any]:
    """``old`` with ``offsets`` and ``changelogs`` written over it, stamped with the time now."""
    merged = {(s, p): o for s, p, o in old.get("offsets", [])}
    merged.update({(ssp.stream_id, ssp.partition): o for ssp, o in offsets.items()})
    cls = dict(old.get("changelogs", {}))
    cls.update(changelogs or {})
    return {"offsets": [[s, p, o] for (s, p), o in sorted(merged.items())], "changelogs": cls,
            "written": int(time.time() * 1000)}


def offsets_of(data: Mapping[str, Any]) -> dict[SSP, int]:
    return {SSP(s, p): o for s, p, o in data.get("offsets", [])}


def changelogs_of(data: Mapping[str, Any]) -> dict[str, int]:
    return dict(data.get("changelogs", {}))


def written_of(data: Mapping[str, Any]) -> float | None:
    """When the checkpoint was written, in seconds since the epoch; None for a checkpoint written
    before checkpoints recorded it."""
    ms = data.get("written")
    return ms / 1000.0 if isinstance(ms, int | float) and not isinstance(ms, bool) else None


def encode(data: Mapping[str, Any]) -> bytes:
    return _encoder.encode(data)


def decode(raw: bytes) -> dict[str, Any]:
    """Raises msgspec.DecodeError on bytes that are not a checkpoint."""
    data = _decoder.decode(raw)
    return data if isinstance(data, dict) else {}
