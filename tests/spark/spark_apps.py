"""Message types for the Spark tests, in a module executors import by name (a msgspec Struct
class cannot be shipped by value)."""

from __future__ import annotations

import msgspec


class View(msgspec.Struct):
    user: str
    ts: float
