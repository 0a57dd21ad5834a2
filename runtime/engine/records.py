"""Control messages that travel in streams beside data: end-of-stream and watermarks.

In an intermediate stream every producing task sends its own; a consumer counts them against the
number of producers (docs/semantics.md rule 15). ``producer`` is None for a bounded input's end."""

from __future__ import annotations

import msgspec

__all__ = ["EndOfStream", "Watermark", "Skipped", "is_control"]


class EndOfStream(msgspec.Struct, frozen=True, tag="eos"):
    producer: str | None = None


class Watermark(msgspec.Struct, frozen=True, tag="wm"):
    """A producing task's event-time progress: none of its later messages in this partition is
    earlier than ``ms`` (less the consumer's declared out-of-orderness). ``idle``: every input of
    the producer is idle, so it holds nobody back until it sends a watermark that is not idle."""

    producer: str | None
    ms: int
    idle: bool = False


class Skipped(msgspec.Struct, frozen=True):
    """A record the job passed over: a control record of an earlier run, a message that failed
    to deserialize under the ``skip`` or ``dead-letter`` policy, a replay of a record already
    applied (``runtime.engine.origins``). It counts as processed."""

    reason: str = ""


_CONTROL = (EndOfStream, Watermark)


def is_control(payload: object) -> bool:
    return isinstance(payload, _CONTROL)
