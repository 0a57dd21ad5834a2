"""``ExecutionPlan``: what the planner gives the runners, and what users look at."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from samza_dsl.jobconfig import JobConfig
from samza_dsl.spec import ApplicationSpec

from .dag import Dag
from .model import Stage, StoreSpec, StreamSpec

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["ExecutionPlan"]


class ExecutionPlan:
    """A planned application.

    - ``graph``: a ``networkx.DiGraph`` of stream (``stream:<id>``), table (``table:<id>``) and
      operator (op id) nodes (made on first use; ``dag`` is the same graph as the planner and
      the runtime read it, ``planner.dag.Dag``, which needs no networkx);
    - ``input_streams``, ``output_streams``, ``intermediate_streams``: stream id -> ``StreamSpec``;
    - ``stages``: sub-DAGs split at partition_by/broadcast;
    - ``tables`` (user tables) and ``stores`` (tables plus window and join state): name -> ``StoreSpec``;
    - ``config``: the user's config over the generated one (``generated_config``);
    - ``warnings``: what the planner sees may go wrong at run time, one line each (a join whose
      key is not the key its stream is partitioned by: ``planner.placement``).

    Example:
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> app, mem = StreamApplication("clicks"), MemorySystem()
        >>> clicks = app.input(mem.input("clicks", partitions=2))
        >>> (clicks.partition_by(lambda c: c["user"], name="by-user")
        ...        .map(lambda kv: kv.value, name="value").send_to(app.output(mem.output("out"))))
        >>> plan = app.plan()
        >>> plan
        ExecutionPlan('clicks-1', stages=2, streams=3, operators=3)
        >>> [stage.operators for stage in plan.stages]  # split at partition_by
        [('clicks-1-partition_by-by-user',), ('clicks-1-map-value', 'clicks-1-send_to-2')]
        >>> plan.intermediate_streams["clicks-1-partition_by-by-user"].partitions
        2
        >>> plan.stage_of("clicks-1-map-value").stage_id, plan.next_ops("stream:clicks")
        ('stage-1', ['clicks-1-partition_by-by-user'])
        >>> plan.to_text() == plan.explain() == str(plan)
        True
        >>> print(plan.explain())
        Plan of clicks-1: 2 stage(s), 3 operator(s)
        Streams:
          input        clicks (2 partitions, system=memory, serde=NoOpSerde())
          output       out (? partitions, system=memory, serde=NoOpSerde())
          intermediate clicks-1-partition_by-by-user (2 partitions, system=memory, serde=default)
        stage-0: clicks -> clicks-1-partition_by-by-user ...
        >>> import json
        >>> plan.to_dict()["stages"] == json.loads(plan.to_json())["stages"]
        True
        >>> print(plan.to_mermaid().splitlines()[0]), plan.to_dot().startswith('digraph "clicks-1"')
        flowchart LR
        (None, True)
        >>> plan.to_svg().startswith("<?xml"), plan.to_html().startswith("<!DOCTYPE html>")
        (True, True)
        >>> plan.render("mermaid") == plan.to_mermaid()  # the format by name, as the CLI's --format
        True
    """

    def __init__(self, app: ApplicationSpec, dag: Dag, streams: Mapping[str, StreamSpec],
                 stages: list[Stage], stores: Mapping[str, StoreSpec], config: Mapping[str, Any],
                 generated_config: Mapping[str, Any]) -> None:
        self.app = app
        self.dag = dag
        self._graph: nx.DiGraph | None = None
        self.streams = dict(streams)
        self.stages = list(stages)
        self.stores = dict(stores)
        self.config = JobConfig.of(app, config)
        self.generated_config = dict(generated_config)
        self.warnings: list[str] = []

    @property
    def graph(self) -> nx.DiGraph:
        """The plan's graph as a ``networkx.DiGraph``, made from ``dag`` on first use."""
        if self._graph is None:
            self._graph = self.dag.to_networkx()
        return self._graph

    @property
    def job_name(self) -> str:
        """``<job.name>-<job.id>``, by default the application's name and app_id."""
        return self.config.job.job_name

    @property
    def input_streams(self) -> dict[str, StreamSpec]:
        return {k: s for k, s in self.streams.items() if s.kind == "input"}

    @property
    def output_streams(self) -> dict[str, StreamSpec]:
        return {k: s for k, s in self.streams.items()
                if s.kind == "output" or k in self.app.outputs}

    @property
    def intermediate_streams(self) -> dict[str, StreamSpec]:
        return {k: s for k, s in self.streams.items() if s.kind in ("intermediate", "broadcast")}

    @property
    def tables(self) -> dict[str, StoreSpec]:
        return {k: s for k, s in self.stores.items() if s.kind == "table"}

    def stage_of(self, op_id: str) -> Stage:
        for stage in self.stages:
            if op_id in stage.operators:
                return stage
        raise KeyError(op_id)

    def next_ops(self, node: str) -> list[str]:
        """Operators fed by ``node`` (a stream node or an op id), in registration order."""
        edges = self.dag.edges
        return [n for n in self.dag.successors(node) if edges[node, n]["kind"] == "data"]

    # -- renderings (planner.render) -------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        from .render import plan_to_dict

        return plan_to_dict(self)

    def to_json(self, *, indent: int | None = 2) -> str:
        from .render import plan_to_json

        return plan_to_json(self, indent=indent)

    def explain(self) -> str:
        from .render import plan_to_text

        return plan_to_text(self)

    def to_text(self) -> str:
        return self.explain()

    def to_dot(self) -> str:
        from .render import plan_to_dot

        return plan_to_dot(self)

    def to_mermaid(self) -> str:
        from .render import plan_to_mermaid

        return plan_to_mermaid(self)

    def to_svg(self) -> str:
        from .render import plan_to_svg

        return plan_to_svg(self)

    def to_html(self) -> str:
        from .render import plan_to_html

        return plan_to_html(self)

    def render(self, fmt: str) -> str:
        from .render import render

        return render(self, fmt)

    def _repr_html_(self) -> str:
        from .render import plan_to_notebook_html

        return plan_to_notebook_html(self)

    def __repr__(self) -> str:
        return (f"ExecutionPlan({self.job_name!r}, stages={len(self.stages)}, "
                f"streams={len(self.streams)}, operators={len(self.app.operators)})")

    def __str__(self) -> str:
        return self.explain()
