"""Stream-table join (docs/semantics.md rule 10), as Samza's ``StreamTableJoinOperatorImpl``.

The key is ``key(m)``, or the message's ``KV.key`` without a key function. The record is looked up
in ``ctx.store(table_id)``; ``combine(m, KV(key, value))`` on a hit and ``combine(m, None)`` on a
miss. A None key skips the lookup and calls ``combine(m, None)``, as in Samza. A None result is
dropped (so ``combine`` chooses an inner or a left join). A key the table's key serde cannot
serialize (an int on a ``StringSerde`` table) fails the message on every store, as the LMDB
store's read of it does (``check_key`` of the table's store, ``operators.state.table_key_check``).

A remote table (one whose store has ``remote = True``, ``runtime.state.remote``) is read
asynchronously: ``process`` returns an awaitable of the outputs, unless the table's cache
answers at once (``cached(key)``), when it completes inline as a local lookup does; on a miss,
``fetch(key)`` reads it from the service. That lookup is ``lookup(message, key)``, an attribute
the runtime may replace when it wires the task (a traced job's lookups are spans).

Where the runtime gives a placement check (``ctx.placement``, ``operators.placement``), a lookup
key is checked against the task's partition before the lookup: every message at first, then a
sample.

>>> from samza_dsl.kv import KV
>>> from samza_dsl.spec import JoinTableSpec
>>> from operators.base import OperatorContext
>>> from operators.state import InMemoryState
>>> profiles = InMemoryState()
>>> profiles.put("u1", {"name": "Ada"})
>>> op = JoinTableOperator(JoinTableSpec("jt", None, ("stream:in",), "", table_id="profiles",
...                        combine=lambda m, r: (m.value, r.value["name"]) if r else None))
>>> op.init(OperatorContext("t0", {}, lambda: 0, {"profiles": profiles}))
>>> op.process(KV("u1", "click")), op.process(KV("u2", "click"))
([('click', 'Ada')], [])
"""

from __future__ import annotations

from typing import Any

from samza_dsl.kv import KV
from samza_dsl.spec import JoinTableSpec

from .base import Operator, OperatorContext, Result, UserContext, resolve_fn

__all__ = ["JoinTableOperator"]


class JoinTableOperator(Operator):
    """See the module docstring. Needs the table's store, named by its table id."""

    opcode = "join_table"

    def __init__(self, spec: JoinTableSpec) -> None:
        super().__init__(spec)
        self.table_id = spec.table_id
        self.user_fns = (spec.combine, spec.key_fn)
        self._combine = resolve_fn(spec.combine)
        self._key_fn = resolve_fn(spec.key_fn) if spec.key_fn is not None else None
        #: the remote table's client, where the table is remote (``runtime.state.remote``)
        self.remote: Any = None
        self._check: Any = None
        self._left = 1  # messages until the next placement check
        #: ``(message, key)`` -> the outputs, or an awaitable of them: the join of a message
        #: on a remote table (replaced where the runtime wires it, before ``init``)
        self.lookup = self._lookup

    def init(self, ctx: OperatorContext, user_ctx: UserContext | None = None) -> None:
        super().init(ctx, user_ctx)
        store = ctx.store(self.table_id)
        self._get = store.get
        #: a key the table's serde cannot serialize fails as the LMDB store's read of it does
        self._check_key = store.check_key
        if store.remote:
            self.remote = store
        elif ctx.placement is not None:
            self._check = ctx.placement(self.op_id, 0)
        self._left = 1

    def process(self, message: Any) -> Result:
        if self._key_fn is not None:
            key = self._key_fn(message)
        elif isinstance(message, KV):
            key = message.key
        else:
            raise TypeError(f"join_table {self.op_id!r} on table {self.table_id!r}: a "
                            f"{type(message).__name__} message has no KV.key; give "
                            f"join_table a key= function")
        record = None
        if key is not None:
            check = self._check
            if check is not None:
                left = self._left - 1
                self._left = left if left else check(key)
            if self.remote is not None:
                return self.lookup(message, key)
            value = self._get(key)
            if value is None and self._check_key is not None:  # a hit was written: it fits
                self._check_key(key)
            if value is not None:
                record = KV(key, value)
        result = self._combine(message, record)
        return [] if result is None else [result]

    def _lookup(self, message: Any, key: Any) -> Result:
        remote = self.remote
        value = remote.cached(key)
        if value is remote.MISS:
            return self._join_remote(message, key)
        result = self._combine(message, None if value is None else KV(key, value))
        return [] if result is None else [result]

    async def _join_remote(self, message: Any, key: Any) -> list[Any]:
        value = await self.remote.fetch(key)  # process() found it missing from the cache
        result = self._combine(message, None if value is None else KV(key, value))
        return [] if result is None else [result]
