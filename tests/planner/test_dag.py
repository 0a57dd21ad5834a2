"""The plan's own graph (``planner.dag``) against networkx: the same reads, the same order of
stages, and no networkx import on a job's path."""

from __future__ import annotations

import subprocess
import sys

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.dag import Dag, ordered_components

_edges = st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=40)


def _both(nodes: list[int], edges: list[tuple[int, int]]) -> tuple[Dag, nx.DiGraph]:
    dag, g = Dag("t"), nx.DiGraph(name="t")
    for n in nodes:
        dag.add_node(f"n{n}", i=n)
        g.add_node(f"n{n}", i=n)
    for k, (u, v) in enumerate(edges):
        dag.add_edge(f"n{u}", f"n{v}", k=k)
        g.add_edge(f"n{u}", f"n{v}", k=k)
    return dag, g


@given(nodes=st.lists(st.integers(0, 11), unique=True), edges=_edges)
@settings(max_examples=300, deadline=None)
def test_the_dag_reads_as_networkx_reads_the_same_graph(nodes: list[int],
                                                         edges: list[tuple[int, int]]) -> None:
    dag, g = _both(nodes, edges)
    assert list(dag.nodes) == list(g.nodes) and len(dag) == len(g)
    assert list(dag.edges) == list(g.edges) and len(dag.edges) == g.number_of_edges()
    assert dag.edges(data=True) == list(g.edges(data=True))
    assert dag.nodes(data=True) == list(g.nodes(data=True))
    for n in g.nodes:
        assert dag.nodes[n] == g.nodes[n]
        assert list(dag.successors(n)) == list(g.successors(n))
        assert list(dag.predecessors(n)) == list(g.predecessors(n))
        assert dag.descendants(n) == nx.descendants(g, n)
        assert dag.ancestors(n) == nx.ancestors(g, n)
    for u, v in g.edges:
        assert (u, v) in dag.edges and dag.edges[u, v] == g.edges[u, v]
    back = dag.to_networkx()
    assert nx.utils.graphs_equal(back, g) and back.graph == g.graph


@given(nodes=st.lists(st.integers(0, 11), unique=True), edges=_edges,
       rank=st.permutations(list(range(12))))
@settings(max_examples=300, deadline=None)
def test_stages_are_ordered_as_networkx_orders_the_condensation(
        nodes: list[int], edges: list[tuple[int, int]], rank: list[int]) -> None:
    """The planner's order of stages: strongly connected groups as one block, blocks in a
    topological order that takes the least key first."""
    dag, g = _both(nodes, edges)

    def key(n: str) -> int:
        return rank[int(n[1:])]

    blocks = nx.condensation(g)
    members = {b: sorted(blocks.nodes[b]["members"], key=key) for b in blocks}
    expected = [members[b] for b in nx.lexicographical_topological_sort(
        blocks, key=lambda b: key(members[b][0]))]
    assert ordered_components(dag, key) == expected


def test_a_missing_node_is_a_key_error() -> None:
    dag = Dag()
    dag.add_node("a")
    for read in (dag.descendants, dag.ancestors):
        try:
            read("b")
        except KeyError as e:
            assert "'b'" in str(e)
        else:
            raise AssertionError("no KeyError")


def test_planning_and_running_a_job_imports_no_networkx_until_asked() -> None:
    """networkx takes a fifth of a second or more to import: a job process, the CLI and the
    Spark workers plan without it; ``plan.graph`` still gives a ``networkx.DiGraph``."""
    code = (
        "import sys\n"
        "from samza_dsl import StreamApplication\n"
        "from samza_dsl.systems import MemorySystem\n"
        "from samza_dsl.testing import TestRunner\n"
        "import runtime.ops.cli\n"
        "from runtime.runner import LocalRunner\n"
        "app = StreamApplication('d')\n"
        "m = MemorySystem()\n"
        "i, o = m.input('in', partitions=2), m.output('out')\n"
        "app.input(i).partition_by(lambda v: v, name='p').map(lambda kv: str(kv.value))"
        ".send_to(app.output(o))\n"
        "plan = app.plan()\n"
        "plan.to_dot(); plan.to_mermaid(); plan.to_json()\n"
        "out = TestRunner(app).add_input(i, [1, 2, 3]).run().messages(o)\n"
        "assert sorted(out) == ['1', '2', '3'], out\n"
        "out = LocalRunner(app, inputs={'in': [1, 2, 3]}).run().messages('out')\n"
        "assert sorted(out) == ['1', '2', '3'], out\n"
        "assert 'networkx' not in sys.modules, 'networkx imported'\n"
        "g = plan.graph\n"
        "import networkx\n"
        "assert isinstance(g, networkx.DiGraph) and g.number_of_nodes() == len(plan.dag)\n"
        "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
