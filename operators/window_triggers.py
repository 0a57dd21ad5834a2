"""A window's early and late trigger progress, kept in the window's store (docs/semantics.md,
"Triggers across a restore").

A trigger's progress (the messages a ``count`` has seen, a time trigger's deadline, whether a
trigger that does not repeat has fired) is state as much as the pane's value is: a window that
lost it on a restart or a move of its task to another host would fire its early and late
panes at other messages than an uninterrupted run does. So each pane's trigger that changed
since the last commit is written at the commit (``flush_state``), under
``(None, "trigger", firing, start, key)``, and deleted once its pane closes. A restore puts each
back on its pane (``_restore_triggers``) with its timer, before the first message.

Time triggers count ``ctx.clock()``, the wall clock, which every host shares: a restored
``time_since_first_message`` fires when it would have fired on the first host.
"""

from __future__ import annotations

from typing import Any, cast

from samza_dsl.windows import FiringType

from .triggers import TriggerImpl, make_trigger

__all__ = ["TriggerProgress", "TRIGGER"]

#: the second part of the store keys that hold trigger progress
TRIGGER = "trigger"
#: what is stored for a trigger that fired and does not repeat (it never fires again)
_RETIRED = 0
_FIRINGS = (FiringType.EARLY, FiringType.LATE)


class TriggerProgress:
    """Mixin of ``WindowOperator``: its ``_early`` and ``_late`` triggers, written to its store
    at commits and read back at a restore. The window calls ``_trigger_changed`` when a
    trigger's progress changed and ``_trigger_gone`` when a pane's trigger left."""

    _early: dict[Any, TriggerImpl | None]
    _late: dict[Any, TriggerImpl | None]
    _early_spec: Any
    _late_spec: Any
    _store: Any

    def _init_trigger_progress(self) -> None:
        #: (firing index, handle): triggers changed (or gone) since the last commit
        self._trig_dirty: set[tuple[int, Any]] = set()
        #: (firing index, handle) -> the (start, key) its progress is stored under
        self._trig_at: dict[tuple[int, Any], tuple[int, Any]] = {}
        #: read at a restore, until ``_restore_triggers`` puts them on their panes
        self._trig_saved: dict[tuple[int, int, Any], Any] = {}

    def _pane_key(self, handle: Any) -> tuple[int, Any]:
        """The ``(start, key)`` of a pane's handle (a session's handle is an object)."""
        return cast(tuple[int, Any], handle)

    def _trigger_handle(self, start: int, key: Any) -> Any:
        """The handle of the pane ``(start, key)`` after a restore, None where it has none."""
        return (start, key)

    def _trigger_changed(self, firing: FiringType, handle: Any) -> None:
        self._trig_dirty.add((0 if firing is FiringType.EARLY else 1, handle))

    def _trigger_gone(self, firing: FiringType, handle: Any) -> None:
        """The pane's trigger left (its pane closed or expired): its stored progress goes at
        the next commit."""
        at = (0 if firing is FiringType.EARLY else 1, handle)
        if at in self._trig_at:
            self._trig_dirty.add(at)

    def _triggers_all_gone(self) -> None:
        """Every trigger left (the end of a bounded run)."""
        self._trig_dirty.update(self._trig_at)

    def _saved_trigger(self, pk: Any, value: Any) -> bool:
        """During a restore: whether store key ``pk`` holds a trigger's progress (kept)."""
        if len(pk) == 5 and pk[1] == TRIGGER:
            self._trig_saved[(pk[2], pk[3], pk[4])] = value
            return True
        return False

    def _restore_triggers(self) -> list[tuple[TriggerImpl, Any, FiringType]]:
        """The triggers read back by ``_restore``, each on its pane; returns them for their
        timers."""
        out: list[tuple[TriggerImpl, Any, FiringType]] = []
        saved, self._trig_saved = self._trig_saved, {}
        for (f, start, key), state in saved.items():
            handle = self._trigger_handle(start, key)
            spec = self._early_spec if f == 0 else self._late_spec
            if handle is None or spec is None:  # no such pane, or the trigger was taken off
                self._store.delete((None, TRIGGER, f, start, key))
                continue
            triggers = self._early if f == 0 else self._late
            self._trig_at[(f, handle)] = (start, key)
            if state == _RETIRED:
                triggers[handle] = None
                continue
            trig = make_trigger(spec)
            try:
                trig.resume(state)
            except (TypeError, ValueError, IndexError):  # another spec's progress: start afresh
                trig = make_trigger(spec)
            triggers[handle] = trig
            out.append((trig, handle, _FIRINGS[f]))
        return out

    def _flush_triggers(self) -> None:
        """The triggers that changed since the last commit into the store; those gone out."""
        dirty = self._trig_dirty
        if not dirty:
            return
        store = self._store
        written = self._trig_at
        for at in dirty:
            f, handle = at
            trig = (self._early if f == 0 else self._late).get(handle, _GONE)
            old = written.get(at)
            if trig is _GONE:
                if old is not None:
                    store.delete((None, TRIGGER, f, *old))
                    del written[at]
                continue
            pk = self._pane_key(handle)
            if old is not None and old != pk:  # the pane's start moved (a session)
                store.delete((None, TRIGGER, f, *old))
            store.put((None, TRIGGER, f, *pk), _RETIRED if trig is None else trig.progress())
            written[at] = pk
        dirty.clear()


_GONE: Any = object()
