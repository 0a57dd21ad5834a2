"""A task's join placement checks (``task.join.partition.check``; ``operators.placement``).

For each join side the plan checks (``planner.placement.checked_ports``: not a side joined with
a broadcast stream, not a lookup into a table every task holds whole), the streams whose
messages reach it in this task, each with its slot: the partitioner its producers use
(``runtime.engine.wiring.partition_of``, over ``N * X`` partitions for ``job.elasticity.factor`` X) and
this task's ``partition + N * bucket``. A stream of one partition read by one task has nothing
to check; a broadcast stream is read whole by every task. Inputs given in memory
(``TestRunner``) are checked as the job checks a topic: a list was placed by the producer's
partitioner, ``{partition: [...]}`` where the test put it.
"""

from __future__ import annotations

from collections.abc import Callable

from operators.placement import KeyCheck, Slot
from planner.placement import SIDES, checked_ports, fix_text, port_roots
from runtime.engine.job import JobModel, TaskModel
from runtime.engine.wiring import partition_of
from samza_dsl.jobconfig import JobConfig
from samza_dsl.spec import JoinSpec, JoinTableSpec

__all__ = ["placement_checks"]


def placement_checks(job: JobModel, model: TaskModel, config: JobConfig,
                     source: Callable[[], tuple[str, int, int | None] | None],
                     ) -> Callable[[str, int], KeyCheck | None] | None:
    """``(op id, port) -> KeyCheck or None`` for the task of ``model``; None when nothing in
    the task is checked (``off``, no join, or only streams of one partition)."""
    policy = config.task.join_partition_check
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
        mine = {sid: slots[sid] for sid in sorted(port_roots(plan, op.inputs[port]))
                if sid in slots}
        if not mine:
            return None
        if isinstance(op, JoinSpec):
            what, side = f"join {op_id!r}", SIDES[port]
        else:
            what, side = f"join_table {op_id!r} on table {op.table_id if isinstance(op, JoinTableSpec) else ''!r}", ""
        return KeyCheck(op_id, what, side, fix_text(op, port), policy, mine, source, x)
    return check

