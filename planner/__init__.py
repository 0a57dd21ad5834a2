"""The planner: pure functions from an application's spec graph to an ``ExecutionPlan``."""

from .build import build_graph, plan
from .model import Stage, StoreSpec, StreamSpec
from .plan import ExecutionPlan
from .render import graph_from_json

__all__ = ["plan", "build_graph", "ExecutionPlan", "StreamSpec", "Stage", "StoreSpec",
           "graph_from_json"]
