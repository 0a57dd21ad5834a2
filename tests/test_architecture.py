"""The structure docs/architecture.md describes holds in the code: every runtime module is in it,
imports point down the layers, the local system and Kafka never import each other, the only
import circles are the two the design allows, ``runtime/task.py`` holds the task and no more,
and no function of the runtime grows past 100 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("samza_dsl", "planner", "operators", "runtime")
LAYER = {"samza_dsl": 1, "planner": 2, "operators": 3, "runtime": 4}
#: circles the design allows: a plan and its renderers, the application and its streams
ALLOWED_CIRCLES = [{"planner.plan", "planner.render"},
                   {"samza_dsl.application", "samza_dsl.stream"}]
#: what sits above the systems and may choose among them
ORCHESTRATION = {"runtime.runner", "runtime.cli", "runtime.dump", "runtime.run_inputs",
                 "runtime.status", "runtime.local", "runtime.kafka"}


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports (any level; ``from x import y`` names x.y when it is
    a module)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def graph() -> nx.DiGraph:
    mods = modules()
    g = nx.DiGraph()
    for name, path in mods.items():
        g.add_node(name)
        for target in imports(name, path, set(mods)):
            g.add_edge(name, target)
    return g


def test_every_runtime_module_is_in_the_architecture_page() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = sorted(str(p.relative_to(ROOT / "runtime")) for p in (ROOT / "runtime").rglob("*.py")
                     if p.name != "__init__.py" and p.name not in text)
    assert not missing, f"docs/architecture.md does not name {missing}"


def test_imports_point_down_the_layers() -> None:
    up = []
    for a, b in graph().edges:
        la, lb = LAYER[a.split(".")[0]], LAYER[b.split(".")[0]]
        # the facade may call the planner and runners lazily (app.plan(), samza_dsl.testing)
        if lb > la and not a.startswith("samza_dsl"):
            up.append((a, b))
    assert not up, up


def test_the_local_system_and_kafka_never_import_each_other_or_from_above() -> None:
    bad = []
    for a, b in graph().edges:
        for room, other in (("runtime.local", "runtime.kafka"), ("runtime.kafka", "runtime.local")):
            if a.startswith(room + ".") and (b == other or b.startswith(other + ".")):
                bad.append((a, b))
        if a.startswith(("runtime.local.", "runtime.kafka.", "runtime.state.")) and \
                b in ORCHESTRATION - {"runtime.local", "runtime.kafka"} | {"runtime.testing"}:
            bad.append((a, b))
    # the engine chooses no system: only orchestration imports the rooms of the systems
    for a, b in graph().edges:
        if a.count(".") == 1 and a.startswith("runtime.") and a not in ORCHESTRATION \
                and b.startswith(("runtime.local.", "runtime.kafka.")):
            bad.append((a, b))
    assert not bad, bad


def test_no_import_circles_but_the_allowed_ones() -> None:
    circles = [c for c in nx.strongly_connected_components(graph()) if len(c) > 1]
    assert all(c in ALLOWED_CIRCLES for c in circles), circles


def test_the_scan_sees_imports() -> None:
    g = graph()
    assert g.has_edge("runtime.task", "runtime.wiring")
    assert g.has_edge("runtime.spark.executor", "runtime.wiring")
    assert not g.has_edge("runtime.spark.executor", "runtime.task")


#: files of ``runtime/`` whose functions are not held to ``MAX_FUNCTION_LINES`` yet (Spark's
#: room, and the local system's compaction)
LONG_FUNCTIONS_LEFT = ("runtime/spark/", "runtime/local/compaction.py")
MAX_FUNCTION_LINES = 100
MAX_TASK_LINES = 700


def test_the_task_module_holds_the_task_and_no_more() -> None:
    lines = len((ROOT / "runtime" / "task.py").read_text().splitlines())
    assert lines <= MAX_TASK_LINES, f"runtime/task.py has {lines} lines"


def test_no_function_in_the_runtime_is_longer_than_100_lines() -> None:
    long = []
    for path in sorted((ROOT / "runtime").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel.startswith(LONG_FUNCTIONS_LEFT):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{rel}:{node.lineno} {node.name} ({n} lines)")
    assert not long, long


#: modules that still import underscore names of others (Spark's room, the local compaction)
PRIVATE_IMPORTS_LEFT = ("runtime.spark.", "runtime.local.compaction")


def test_no_module_imports_another_modules_underscore_names() -> None:
    bad = []
    for name, path in modules().items():
        if name.startswith(PRIVATE_IMPORTS_LEFT):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LAYER:
                bad += [f"{name}: {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, bad
