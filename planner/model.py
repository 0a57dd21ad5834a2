"""The plan's data: streams with partition counts, stages, stores."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from samza_dsl.spec import TableSpec

__all__ = ["StreamSpec", "Stage", "StoreSpec"]

STREAM_KINDS = ("input", "output", "intermediate", "broadcast")


@dataclass(frozen=True)
class StreamSpec:
    """A stream in the plan. ``partitions`` is None where only the system can tell at run time."""

    stream_id: str
    kind: str
    system: str | None
    physical_name: str
    partitions: int | None
    serde: str
    keyed: bool
    descriptor: Any = field(default=None, compare=False, repr=False)

    @property
    def reading_order(self) -> dict[str, Any]:
        """An input's bootstrap, priority and side-input settings, where it has any
        (``{"bootstrap": True}``, ``{"priority": 2}``, ``{"side_input_of": "users"}``); else
        empty."""
        d = self.descriptor
        out: dict[str, Any] = {}
        if getattr(d, "bootstrap", False):
            out["bootstrap"] = True
        if getattr(d, "priority", None) is not None:
            out["priority"] = d.priority
        if getattr(d, "side_input_of", None) is not None:
            out["side_input_of"] = d.side_input_of
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "system": self.system, "physical_name": self.physical_name,
                "partitions": self.partitions, "serde": self.serde, "keyed": self.keyed,
                **self.reading_order}


@dataclass(frozen=True)
class Stage:
    """A sub-DAG from input streams (external or intermediate) to terminals."""

    stage_id: str
    inputs: tuple[str, ...]
    operators: tuple[str, ...]  # topological order
    outputs: tuple[str, ...]  # output and intermediate stream ids written
    tables_written: tuple[str, ...] = ()
    tables_read: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.stage_id, "inputs": list(self.inputs), "operators": list(self.operators),
                "outputs": list(self.outputs), "tables_written": list(self.tables_written),
                "tables_read": list(self.tables_read)}


@dataclass(frozen=True)
class StoreSpec:
    """A local store: a user table, or the state of a window or a join side."""

    name: str
    kind: str  # "table", "window", "join"
    op_id: str | None
    changelog: str | None  # "system.stream", or None without a changelog
    table: TableSpec | None = None

    @property
    def changelog_system(self) -> str | None:
        """The system of the changelog (None without one, or where the plan knew no system)."""
        if self.changelog is None or "." not in self.changelog:
            return None
        return self.changelog.partition(".")[0]

    @property
    def changelog_stream(self) -> str | None:
        """The changelog's stream in its system (None without a changelog)."""
        if self.changelog is None:
            return None
        return self.changelog.partition(".")[2] or self.changelog

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "op_id": self.op_id, "changelog": self.changelog}
