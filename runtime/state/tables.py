"""The table a user function gets from ``ctx.table(name)``, over a task's store."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from samza_dsl.kv import KV

__all__ = ["LocalTable"]


class LocalTable:
    """get/put/delete/get_all/put_all/range/all over a sorted key-value store."""

    def __init__(self, name: str, store: Any) -> None:
        self.name = name
        self.store = store
        self.get = store.get  # the hot path: no extra frame
        self.put = store.put
        self.delete = store.delete

    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        out = {}
        for k in keys:
            v = self.store.get(k)
            if v is not None:
                out[k] = v
        return out

    def put_all(self, entries: Iterable[KV[Any, Any] | tuple[Any, Any]]) -> None:
        for k, v in entries:
            if v is None:
                self.store.delete(k)
            else:
                self.store.put(k, v)

    def range(self, start: Any, end: Any) -> Iterator[KV[Any, Any]]:
        for k, v in self.store.range(start, end):
            yield KV(k, v)

    def all(self) -> Iterator[KV[Any, Any]]:
        for k, v in self.store.all():
            yield KV(k, v)

    def __repr__(self) -> str:
        return f"LocalTable({self.name!r})"
