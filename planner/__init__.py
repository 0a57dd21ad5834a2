"""The planner: pure functions from an application's spec graph to an ``ExecutionPlan``.

>>> from samza_dsl import StreamApplication
>>> from samza_dsl.systems import MemorySystem
>>> app = StreamApplication("demo")
>>> mem = MemorySystem()
>>> app.input(mem.input("in", partitions=4)).partition_by(str, name="by-key").sink(print)
>>> p = app.plan()
>>> p.intermediate_streams["demo-1-partition_by-by-key"].partitions
4
>>> [(s.stage_id, s.inputs) for s in p.stages]
[('stage-0', ('in',)), ('stage-1', ('demo-1-partition_by-by-key',))]
"""

from .build import build_graph, plan
from .model import Stage, StoreSpec, StreamSpec
from .plan import ExecutionPlan
from .render import graph_from_json
from .validate import refuse_processing_time_joins, refuse_remote_tables

__all__ = ["refuse_remote_tables", "refuse_processing_time_joins", "plan", "build_graph", "ExecutionPlan", "StreamSpec", "Stage", "StoreSpec",
           "graph_from_json"]
