"""The plan's graph as the planner and the runtime read it: a small directed graph with
attributes on nodes and edges, in insertion order, offering the few reads of
``networkx.DiGraph`` they need (``nodes[n]``, ``edges[u, v]``, ``successors``, ``predecessors``,
``descendants``, ``ancestors``).

Every job process, every CLI command and every Spark worker plans the application; importing
networkx whole took 0.15 to 0.5 s of each one's start. ``ExecutionPlan.graph`` still gives the
``networkx.DiGraph`` (built on first use) for users' own analyses.

Example:
    >>> g = Dag("demo")
    >>> g.add_edge("a", "b", kind="data")
    >>> g.add_edge("b", "c", kind="write")
    >>> g.edges["a", "b"]["kind"], list(g.successors("a")), sorted(g.descendants("a"))
    ('data', ['b'], ['b', 'c'])
    >>> sorted(g.ancestors("c")), list(g.edges), g.to_networkx().number_of_edges()
    (['a', 'b'], [('a', 'b'), ('b', 'c')], 2)
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Dag", "ordered_components"]


class _Nodes:
    """``dag.nodes``: ``nodes[n]`` is a node's attributes; iterates the nodes; ``nodes(data=True)``
    gives ``(n, attributes)`` pairs."""

    __slots__ = ("_attrs",)

    def __init__(self, attrs: dict[str, dict[str, Any]]) -> None:
        self._attrs = attrs

    def __getitem__(self, node: str) -> dict[str, Any]:
        return self._attrs[node]

    def __iter__(self) -> Iterator[str]:
        return iter(self._attrs)

    def __len__(self) -> int:
        return len(self._attrs)

    def __contains__(self, node: object) -> bool:
        return node in self._attrs

    def __call__(self, data: bool = False) -> list[Any]:
        return list(self._attrs.items()) if data else list(self._attrs)


class _Edges:
    """``dag.edges``: ``edges[u, v]`` is an edge's attributes; iterates ``(u, v)`` pairs;
    ``edges(data=True)`` gives ``(u, v, attributes)``."""

    __slots__ = ("_succ",)

    def __init__(self, succ: dict[str, dict[str, dict[str, Any]]]) -> None:
        self._succ = succ

    def __getitem__(self, edge: tuple[str, str]) -> dict[str, Any]:
        u, v = edge
        return self._succ[u][v]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return ((u, v) for u, nbrs in self._succ.items() for v in nbrs)

    def __len__(self) -> int:
        return sum(map(len, self._succ.values()))

    def __contains__(self, edge: object) -> bool:
        if not isinstance(edge, tuple) or len(edge) != 2:
            return False
        u, v = edge
        return v in self._succ.get(u, ())

    @overload
    def __call__(self) -> list[tuple[str, str]]: ...
    @overload
    def __call__(self, data: bool) -> list[Any]: ...

    def __call__(self, data: bool = False) -> list[Any]:
        if data:
            return [(u, v, d) for u, nbrs in self._succ.items() for v, d in nbrs.items()]
        return list(self)


class Dag:
    """A directed graph with attributes, in insertion order (see the module doc)."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._attrs: dict[str, dict[str, Any]] = {}
        self._succ: dict[str, dict[str, dict[str, Any]]] = {}
        self._pred: dict[str, dict[str, dict[str, Any]]] = {}
        self.nodes = _Nodes(self._attrs)
        self.edges = _Edges(self._succ)

    def add_node(self, node: str, **attrs: Any) -> None:
        """Adds ``node`` (or updates its attributes)."""
        if node in self._attrs:
            self._attrs[node].update(attrs)
            return
        self._attrs[node] = dict(attrs)
        self._succ[node] = {}
        self._pred[node] = {}

    def add_edge(self, u: str, v: str, **attrs: Any) -> None:
        """Adds the edge ``u -> v`` (and its nodes), or updates its attributes."""
        for node in (u, v):
            if node not in self._attrs:
                self.add_node(node)
        data = self._succ[u].get(v)
        if data is None:
            data = self._succ[u][v] = self._pred[v][u] = {}
        data.update(attrs)

    def __contains__(self, node: object) -> bool:
        return node in self._attrs

    def __len__(self) -> int:
        return len(self._attrs)

    def successors(self, node: str) -> Iterator[str]:
        return iter(self._succ[node])

    def predecessors(self, node: str) -> Iterator[str]:
        return iter(self._pred[node])

    def descendants(self, node: str) -> set[str]:
        """The nodes reachable from ``node``, but itself."""
        return _reach(self._succ, node)

    def ancestors(self, node: str) -> set[str]:
        """The nodes ``node`` is reachable from, but itself."""
        return _reach(self._pred, node)

    def to_networkx(self) -> nx.DiGraph:
        """The same graph as a ``networkx.DiGraph`` (networkx is imported here)."""
        import networkx as nx

        g = nx.DiGraph(name=self.name)
        g.add_nodes_from(self._attrs.items())
        g.add_edges_from((u, v, d) for u, nbrs in self._succ.items() for v, d in nbrs.items())
        return g


def _reach(adjacency: dict[str, dict[str, Any]], node: str) -> set[str]:
    if node not in adjacency:
        raise KeyError(f"node {node!r} is not in the graph")
    seen: set[str] = set()
    todo = list(adjacency[node])
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(adjacency[n])
    seen.discard(node)
    return seen


def ordered_components(dag: Dag, key: Callable[[str], Any]) -> list[list[str]]:
    """The strongly connected components of ``dag``, each's nodes sorted by ``key``, in a
    topological order of the components that takes, of those ready, the one whose first node
    has the least ``key`` (networkx's ``lexicographical_topological_sort`` of its
    ``condensation``)."""
    components = _components(dag)
    block_of = {n: i for i, nodes in enumerate(components) for n in nodes}
    members = [sorted(nodes, key=key) for nodes in components]
    after: list[set[int]] = [set() for _ in components]
    waiting = [0] * len(components)
    for u, v in dag.edges:
        a, b = block_of[u], block_of[v]
        if a != b and b not in after[a]:
            after[a].add(b)
            waiting[b] += 1
    ready = [(key(members[i][0]), i) for i in range(len(components)) if not waiting[i]]
    heapq.heapify(ready)
    out: list[list[str]] = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(members[i])
        for j in after[i]:
            waiting[j] -= 1
            if not waiting[j]:
                heapq.heappush(ready, (key(members[j][0]), j))
    return out


def _components(dag: Dag) -> list[list[str]]:
    """Tarjan's strongly connected components, without recursion."""
    succ = dag._succ
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in succ:
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(succ[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        n = stack.pop()
                        on_stack.discard(n)
                        component.append(n)
                        if n == node:
                            break
                    out.append(component)
    return out
