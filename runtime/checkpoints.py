"""The checkpoint record every checkpoint store writes: a task's input offsets and its stores'
changelog positions, merged with the task's previous checkpoint (a task may checkpoint some of
its partitions only)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from runtime.job import SSP

__all__ = ["merge", "offsets_of", "changelogs_of", "encode", "decode"]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


def merge(old: Mapping[str, Any], offsets: Mapping[SSP, int],
          changelogs: Mapping[str, int] | None) -> dict[str, Any]:
    """``old`` with ``offsets`` and ``changelogs`` written over it."""
    merged = {(s, p): o for s, p, o in old.get("offsets", [])}
    merged.update({(ssp.stream_id, ssp.partition): o for ssp, o in offsets.items()})
    cls = dict(old.get("changelogs", {}))
    cls.update(changelogs or {})
    return {"offsets": [[s, p, o] for (s, p), o in sorted(merged.items())], "changelogs": cls}


def offsets_of(data: Mapping[str, Any]) -> dict[SSP, int]:
    return {SSP(s, p): o for s, p, o in data.get("offsets", [])}


def changelogs_of(data: Mapping[str, Any]) -> dict[str, int]:
    return dict(data.get("changelogs", {}))


def encode(data: Mapping[str, Any]) -> bytes:
    return _encoder.encode(data)


def decode(raw: bytes) -> dict[str, Any]:
    """Raises msgspec.DecodeError on bytes that are not a checkpoint."""
    data = _decoder.decode(raw)
    return data if isinstance(data, dict) else {}
