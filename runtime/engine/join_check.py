"""A task's join placement checks (``task.join.partition.check``; ``operators.placement``).

For each join side the plan checks (``planner.placement.checked_ports``: not a side joined with
a broadcast stream, not a lookup into a table every task holds whole), the streams whose
messages reach it in this task, each with its slot: the partitioner its producers use
(``runtime.engine.wiring.partition_of``, over ``N * X`` partitions for ``job.elasticity.factor`` X) and
this task's ``partition + N * bucket``. A stream of one partition read by one task has nothing
to check; a broadcast stream is read whole by every task. Inputs given in memory (a test's: a
list is partition 0) were placed by no partitioner: a side reading them is held to the rule of
the streams it meets, where a partitioner placed those.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from operators.placement import KeyCheck, Slot
from planner.placement import SIDES, checked_ports, fix_text, other_roots, port_roots
from runtime.engine.job import JobModel, TaskModel
from runtime.engine.wiring import partition_of
from samza_dsl.config import config_value
from samza_dsl.spec import JoinSpec, JoinTableSpec

__all__ = ["placement_checks"]


def placement_checks(job: JobModel, model: TaskModel, config: Mapping[str, Any],
                     source: Callable[[], tuple[str, int, int | None] | None],
                     inputs_placed: bool = True) -> Callable[[str, int], KeyCheck | None] | None:
    """``(op id, port) -> KeyCheck or None`` for the task of ``model``; None when nothing in
    the task is checked (``off``, no join, or only streams of one partition).
    ``inputs_placed``: False where the inputs hold what a test gave (in memory)."""
    policy = config_value(config, "task.join.partition.check")
    plan = job.plan
    checked = checked_ports(plan)
    if policy == "off" or not any(any(ports) for ports in checked.values()):
        return None
    x = model.buckets
    slots: dict[str, Slot] = {}
    for ssp in model.ssps:
        if plan.streams[ssp.stream_id].kind == "broadcast":
            continue
        n = job.partitions[ssp.stream_id]
        if n * x > 1:
            partitioner = partition_of(plan, ssp.stream_id, n * x, 0).partitioner
            slots[ssp.stream_id] = (partitioner, n, ssp.partition + n * model.bucket,
                                    ssp.stream_id)
    if not slots:
        return None

    def check(op_id: str, port: int) -> KeyCheck | None:
        if not checked.get(op_id, (False, False))[port]:
            return None
        op = plan.app.operator(op_id)
        given = set() if inputs_placed else set(plan.input_streams)
        mine = _side_slots(plan, op, port, slots, given)
        if not mine:
            return None
        if isinstance(op, JoinSpec):
            what, side = f"join {op_id!r}", SIDES[port]
        else:
            what, side = f"join_table {op_id!r} on table {op.table_id if isinstance(op, JoinTableSpec) else ''!r}", ""
        return KeyCheck(op_id, what, side, fix_text(op, port), policy, mine, source, x)
    return check


def _side_slots(plan: Any, op: Any, port: int, slots: Mapping[str, Slot],
                given: set[str]) -> dict[str, Slot]:
    """The slots of the streams reaching ``port`` of ``op`` in the task. A stream placed by a
    partitioner is checked by its own rule; one placed by nobody (an input in memory) by the
    rule of the streams it meets where they are placed by one (where neither is, the test's
    placement decides what meets, and nothing is checked). ``given``: the streams placed by
    nobody."""
    out: dict[str, Slot] = {}
    unplaced = []
    for sid in sorted(port_roots(plan, op.inputs[port])):
        if sid in slots:
            if sid in given:
                unplaced.append(sid)
            else:
                out[sid] = slots[sid]
    if unplaced:
        placed = sorted(s for s in other_roots(plan, op, port) if s in slots and s not in given)
        if placed:
            partitioner, n, _, rule = slots[placed[0]]
            for sid in unplaced:
                out[sid] = (partitioner, n, slots[sid][2], rule)
    return out
