"""``LateMessage``: what a window sends to its ``late_to`` stream for a message that came too late
for its pane (docs/semantics.md rule 8).

A message is late when its event time lies in a pane the window's watermark has already closed,
past the window's allowed lateness. Such a message is never dropped silently: it is counted per
window and per input stream, and the first one of each window and stream logs a warning. With
``window(..., late_to=stream)`` it is also written to that stream, wrapped in a ``LateMessage``
that says which pane it missed and how late it was. The default serde of intermediate streams
(``SafeSerde``) and ``JsonSerde``/``MsgpackSerde`` write it as they are.

>>> from samza_dsl.serdes import SafeSerde
>>> from samza_dsl.kv import KV
>>> late = LateMessage(KV("a", (1, 2)), "app-1-window-w", "a", "10000", 12_500, 30_000,
...                    "views", 0, 17)
>>> late.behind_ms
17500
>>> SafeSerde().deserialize(SafeSerde().serialize(late)) == late
True
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["LateMessage"]


class LateMessage(msgspec.Struct, frozen=True, gc=False):
    """A late message and why it was late.

    Attributes:
        message: The message as the window received it.
        window: The window operator's id (or the event-time join's).
        key: The key of the pane it missed, as in ``WindowKey`` (a join's: its join key).
        pane_id: The pane it missed, as in ``WindowKey`` (``pane_id`` is the pane start in ms as
            a string; for a session, the session it would have started; for an event-time
            join, the side it came to: "left" or "right").
        event_time_ms: Its event time.
        watermark_ms: The window's (join's) watermark when it came.
        stream: Where it came into the task: the input stream (None where unknown, e.g. a
            message emitted at a window tick).
        partition: Where it came into the task: the partition (None where unknown).
        offset: Where it came into the task: the offset (None where unknown).

    Example:
        >>> late = LateMessage("click", "app-1-window-w", None, "0", 1_000, 70_000)
        >>> late.pane_id, late.behind_ms, late.stream
        ('0', 69000, None)
    """

    message: Any
    window: str
    key: Any
    pane_id: str
    event_time_ms: int
    watermark_ms: int
    stream: str | None = None
    partition: int | None = None
    offset: int | None = None

    @property
    def behind_ms(self) -> int:
        """How far its event time was behind the watermark, in ms.

        Returns:
            ``watermark_ms - event_time_ms``.
        """
        return self.watermark_ms - self.event_time_ms
