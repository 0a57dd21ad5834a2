"""The messages of a JSON Lines file with each one's line number, so that an error about a
message (``samza-dsl load``, ``run --input``) can name ``file:line``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["JsonLines"]


class JsonLines(list[Any]):
    """The messages of a JSON Lines file, with the file's path and each message's line number
    (blank lines are not messages), so that an error about a message can name its line."""

    def __init__(self, path: str, messages: Sequence[Any] = (),
                 lines: Sequence[int] = ()) -> None:
        super().__init__(messages)
        self.path = path
        self.lines: list[int] = list(lines)

    def where(self, index: int) -> str:
        """``PATH:LINE`` of message ``index`` (from 0)."""
        return f"{self.path}:{self.lines[index]}"
