"""The structure docs/architecture.md describes holds in the code: every runtime module is in it,
imports point down the layers (but for the few lazy calls up that ``LAZY_UP`` names), the local
system and Kafka never import each other, the only import circles are the two the design allows,
no module imports another module's underscore names, ``runtime/engine/task.py`` holds the task and no
more, no function in ``runtime/`` or ``operators/`` is longer than 100 lines, and who moves a
window's watermark is set where the window is built and nowhere else."""

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
#: the only imports that point up a layer, each made inside a function (or for types only), so
#: that importing the lower module never loads the upper one
LAZY_UP = {
    # the facade: app.plan() (and its return type) calls the planner
    ("samza_dsl.application", "planner"), ("samza_dsl.application", "planner.plan"),
    # the facade: samza_dsl.testing's TestRunner and TestResult are the runtime's
    ("samza_dsl.testing", "runtime.testing"),
    # the facades: samza_dsl.files, .postgres and .iceberg describe outputs whose sinks write
    # in the runtime
    ("samza_dsl.files", "runtime.connectors.files"),
    ("samza_dsl.postgres", "runtime.connectors.postgres"),
    ("samza_dsl.iceberg", "runtime.connectors.iceberg"),
    # and an Iceberg table read by a reprocessing run, which Spark's side reads
    ("samza_dsl.iceberg", "runtime.spark.iceberg"),
    # a plan's pictures show the tier each stage takes on Spark, which is Spark's choice
    ("planner.render", "runtime.spark.tiers"),
}
#: the rooms of runtime/ (docs/architecture.md) and the rooms each may import. The engine and
#: the stores import each other (a task's stores; a store's codecs and the task's records): the
#: one circle between rooms. The front (``runtime/*.py``: the runners, the in-memory system's
#: TestRunner, a run's inputs, progress and summary) may import every room but ops; ops (the
#: command line and the job page) imports any.
ROOMS_MAY_IMPORT: dict[str, set[str]] = {
    "host": set(),
    "engine": {"host", "state"},
    "state": {"host", "engine"},
    "connectors": set(),  # built on the public connector API (samza_dsl.connectors) alone
    "memory": {"engine", "host", "state"},
    "local": {"engine", "host", "state"},
    "kafka": {"engine", "host", "state"},
    "spark": {"engine", "host", "state", "memory", "kafka", "connectors"},
}
FRONT_MAY_NOT_IMPORT = {"ops"}
SUBPACKAGES = {"engine", "host", "ops", "state", "local", "kafka", "spark", "connectors"}


def runtime_room(name: str) -> str:
    """The room of a runtime module: its subpackage, ``memory``, or ``front``."""
    parts = name.split(".")
    if len(parts) > 1 and (parts[1] in SUBPACKAGES or parts[1] == "memory"):
        return parts[1]
    return "front"


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _targets(node: ast.Import | ast.ImportFrom, package: str, known: set[str]) -> list[str]:
    """The project modules one import statement names (``from x import y`` names x.y when it is
    a module)."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            up = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*up, base] if base else up)
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                   for a in node.names]
    found = []
    for t in targets:
        while t and t not in known:
            t = t.rpartition(".")[0]
        if t:
            found.append(t)
    return found


Site = tuple[ast.Import | ast.ImportFrom, str, bool]


def import_sites(name: str, path: Path, known: set[str]) -> list[Site]:
    """Every import of a project module in ``name``: the statement, the module it names, and
    whether it is lazy (inside a function, or under ``if TYPE_CHECKING:`` for types only)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[Site] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                out.extend((child, t, lazy) for t in _targets(child, package, known) if t != name)
            inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) \
                or (isinstance(child, ast.If) and ast.unparse(child.test) == "TYPE_CHECKING")
            visit(child, inner)

    visit(ast.parse(path.read_text()), False)
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports (any level; ``from x import y`` names x.y when it is
    a module)."""
    return {t for _, t, _ in import_sites(name, path, known)}


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
    mods = modules()
    up = []
    for name, path in mods.items():
        for _, target, lazy in import_sites(name, path, set(mods)):
            la, lb = LAYER[name.split(".")[0]], LAYER[target.split(".")[0]]
            if lb > la and not (lazy and (name, target) in LAZY_UP):
                up.append((name, target, "at import time" if not lazy else "not in LAZY_UP"))
    assert not up, up


def test_every_lazy_call_up_the_layers_is_still_made() -> None:
    g = graph()
    assert all(g.has_edge(a, b) for a, b in LAZY_UP), [e for e in LAZY_UP if not g.has_edge(*e)]


def test_each_room_of_the_runtime_imports_only_the_rooms_below_it() -> None:
    bad = []
    for a, b in graph().edges:
        if not (a.startswith("runtime.") and b.startswith("runtime.")):
            continue
        ra, rb = runtime_room(a), runtime_room(b)
        if ra == rb or ra == "ops":
            continue
        allowed = ROOMS_MAY_IMPORT.get(ra)
        if (allowed is None and rb in FRONT_MAY_NOT_IMPORT) or \
                (allowed is not None and rb not in allowed):
            bad.append((a, b))
    assert not bad, bad


def test_the_rooms_rule_names_every_room() -> None:
    found = {runtime_room(n) for n in modules() if n.startswith("runtime.")}
    assert found == set(ROOMS_MAY_IMPORT) | {"front", "ops"}, found
    # the rule sees an import that breaks it: the engine choosing a system
    assert "kafka" not in ROOMS_MAY_IMPORT[runtime_room("runtime.engine.container")]
    assert runtime_room("runtime.kafka.group") == "kafka"
    assert runtime_room("runtime.runner") == "front"


def test_no_import_circles_but_the_allowed_ones() -> None:
    circles = [c for c in nx.strongly_connected_components(graph()) if len(c) > 1]
    assert all(c in ALLOWED_CIRCLES for c in circles), circles


def test_the_scan_sees_imports() -> None:
    g = graph()
    assert g.has_edge("runtime.engine.task", "runtime.engine.wiring")
    assert g.has_edge("runtime.spark.executor", "runtime.engine.wiring")
    assert not g.has_edge("runtime.spark.executor", "runtime.engine.task")


def test_no_module_imports_another_modules_underscore_names() -> None:
    mods = modules()
    private: set[tuple[str, str]] = set()
    for name, path in mods.items():
        for node, target, _ in import_sites(name, path, set(mods)):
            if not isinstance(node, ast.ImportFrom):
                continue
            private |= {(name, f"{target}.{a.name}") for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")}
    assert not private, sorted(private)


def test_no_function_in_the_runtime_or_the_operators_is_longer_than_100_lines() -> None:
    long = []
    for name, path in modules().items():
        if not name.startswith(("runtime", "operators")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) \
                    and node.end_lineno is not None and node.end_lineno - node.lineno >= 100:
                long.append((name, node.name, node.end_lineno - node.lineno + 1))
    assert not long, long


MAX_TASK_LINES = 700


def test_the_task_module_holds_the_task_and_no_more() -> None:
    lines = len((ROOT / "runtime" / "engine" / "task.py").read_text().splitlines())
    assert lines <= MAX_TASK_LINES, f"runtime/engine/task.py has {lines} lines"


def _sets_local_watermark(node: ast.AST) -> bool:
    """Whether ``node`` writes an attribute ``local_watermark``: an assignment to it (also in a
    tuple, augmented or annotated, or through ``__dict__[...]``) or ``setattr(x, "local_watermark",
    ...)``."""
    def named(t: ast.AST) -> bool:
        if isinstance(t, ast.Tuple | ast.List):
            return any(named(e) for e in t.elts)
        if isinstance(t, ast.Starred):
            return named(t.value)
        if isinstance(t, ast.Attribute):
            return t.attr == "local_watermark"
        return isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) \
            and t.slice.value == "local_watermark"
    if isinstance(node, ast.Assign):
        return any(named(t) for t in node.targets)
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return named(node.target)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id == "setattr" and len(node.args) >= 2:
        return isinstance(node.args[1], ast.Constant) and node.args[1].value == "local_watermark"
    return False


def local_watermark_writes() -> list[tuple[str, str, int]]:
    """Every place that writes a ``local_watermark``: (module, enclosing class.function, line)."""
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, name: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                inner = f"{where}.{child.name}" if where else child.name
            if _sets_local_watermark(child):
                found.append((name, where, child.lineno))  # type: ignore[attr-defined]
            visit(child, name, inner)

    for name, path in modules().items():
        visit(ast.parse(path.read_text()), name, "")
    return found


def test_a_window_s_watermark_ownership_is_fixed_when_it_is_built() -> None:
    """``local_watermark`` is set in the window's (an event-time join's) ``init`` from its
    context and nowhere else: nothing switches who moves a window's watermark while it runs."""
    writes = local_watermark_writes()
    assert sorted((m, w) for m, w, _ in writes) == [
        ("operators.join_event_time", "EventTimeJoinOperator.init"),
        ("operators.window", "WindowOperator.init")], writes


def test_the_scan_sees_writes_of_local_watermark() -> None:
    tree = ast.parse("class A:\n    def f(self, op):\n        op.local_watermark = True\n"
                     "        a, (b.local_watermark, c) = 1, (2, 3)\n"
                     "        setattr(op, 'local_watermark', False)\n"
                     "        op.__dict__['local_watermark'] = 1\n        op.other = 1\n")
    assert sum(_sets_local_watermark(n) for n in ast.walk(tree)) == 4


#: names under which the runtime holds producers and operators
_SEAM_NAMES = ("producer", "op", "operator")


def _probed(node: ast.AST) -> str | None:
    """The name a ``getattr``/``hasattr`` call probes for a capability, where its object is a
    producer or an operator by name (``producer``, ``self.producer``, ``op``, ``m.window``...)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2):
        return None
    obj = node.args[0]
    name = obj.attr if isinstance(obj, ast.Attribute) else obj.id if isinstance(obj, ast.Name) \
        else None
    if name is None or not any(name == s or name.endswith(f"_{s}") for s in _SEAM_NAMES):
        return None
    return name


def test_no_capability_of_a_producer_or_an_operator_is_found_with_getattr() -> None:
    """Producers (``runtime.engine.systems.Producer``) and operators (``operators.base.Operator``)
    declare what they offer; the runtime does not probe them by attribute name."""
    found = []
    for name, path in modules().items():
        if not name.startswith(("runtime", "operators")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            probed = _probed(node)
            if probed is not None:
                found.append((name, node.lineno, probed))  # type: ignore[attr-defined]
    assert not found, found


def test_the_scan_sees_probes_of_producers_and_operators() -> None:
    tree = ast.parse("getattr(producer, 'sends', 0)\nhasattr(self.producer, 'x')\n"
                     "getattr(op, 'process_columns', None)\ngetattr(self.txn.producer, 'm')\n"
                     "getattr(shared_producer, 'x')\ngetattr(module, 'app')\n"
                     "getattr(args, 'traceback')\n")
    assert sum(_probed(n) is not None for n in ast.walk(tree)) == 5


def unmarked_probes(source: str) -> list[tuple[int, str]]:
    """The ``getattr``/``hasattr`` calls of ``source`` without a ``# foreign`` comment on one of
    their lines: (line, the call's first line). The project's own objects declare what they
    offer (Protocols and base classes with defaults); a probe by attribute name is for objects
    the project does not define (a user's function, a module, aiokafka's or Spark's objects),
    and says so."""
    import io
    import tokenize
    marked: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and tok.string.lstrip("# ").startswith("foreign"):
            marked.add(tok.start[0])
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr"):
            span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
            if not marked.intersection(span):
                found.append((node.lineno, lines[node.lineno - 1].strip()))
    return found


def test_no_capability_of_the_projects_own_objects_is_found_with_getattr() -> None:
    """Across the runtime and the operators, ``getattr``/``hasattr`` only on foreign objects,
    each marked ``# foreign: <whose>``."""
    found = []
    for name, path in modules().items():
        if name.startswith(("runtime", "operators")):
            found += [(name, line, text) for line, text in unmarked_probes(path.read_text())]
    assert not found, "\n".join(f"{n}:{line}: {text}" for n, line, text in found)


def test_the_scan_sees_unmarked_probes() -> None:
    source = ("a = getattr(x, 'y', None)\nb = hasattr(x, 'y')  # foreign: a user's object\n"
              "c = getattr(\n    x, 'z')  # foreign: a module\nd = getattr(x, 'w')  # a comment\n"
              "e = [getattr(o, 'k')\n     for o in os]\n")
    assert [line for line, _ in unmarked_probes(source)] == [1, 5, 6]


#: the aiokafka internals the Kafka layer uses, each only in runtime/kafka/aiokafka_compat.py
AIOKAFKA_INTERNALS = frozenset({
    "_sender", "_txn_manager", "_message_accumulator", "_coordinator", "_send_req", "_fetcher",
    "_isolation_level", "_builder", "_relative_offset", "_consumer_record",
    "_contains_abort_marker", "_records", "_drain_waiter", "_pending_batches", "_send_request",
    "_send_to_controller", "_conns", "_client"})


def aiokafka_internal_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """Attribute reads and writes of aiokafka's internal names, and imports of its fetcher."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in AIOKAFKA_INTERNALS:
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id == "self":
                continue  # a class's own attribute of the same name
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                ("aiokafka.consumer.fetcher", "aiokafka.producer")):
            found.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.ImportFrom) and node.module == "aiokafka.consumer" and any(
                a.name == "fetcher" for a in node.names):
            found.append((node.lineno, "aiokafka.consumer.fetcher"))
    return found


def test_aiokafka_internals_are_used_in_the_compatibility_module_only() -> None:
    found = [(name, *use) for name, path in modules().items()
             if name != "runtime.kafka.aiokafka_compat"
             for use in aiokafka_internal_uses(ast.parse(path.read_text()))]
    assert not found, found


def test_the_scan_sees_uses_of_aiokafka_internals() -> None:
    tree = ast.parse("producer._txn_manager\nbatch._builder.append\nc._coordinator._send_req = f\n"
                     "from aiokafka.consumer import fetcher\nself._records\nx.records\n")
    assert sorted(u for _, u in aiokafka_internal_uses(tree)) == [
        "_builder", "_coordinator", "_send_req", "_txn_manager", "aiokafka.consumer.fetcher"]


#: aiokafka's public modules: its top level, its errors, structs, ABCs, helpers and admin client
#: (``runtime/kafka/aiokafka_compat.py`` says why); every other module of it is internal
AIOKAFKA_PUBLIC = frozenset({"aiokafka", "aiokafka.errors", "aiokafka.structs", "aiokafka.abc",
                             "aiokafka.helpers", "aiokafka.admin"})


def aiokafka_internal_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """Imports of aiokafka's internal modules (``from aiokafka import protocol`` too), lazy ones
    included."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "aiokafka":  # a submodule imported by name (classes are Capitalised)
                names += [f"aiokafka.{a.name}" for a in node.names if a.name.islower()]
        else:
            continue
        found += [(node.lineno, n) for n in names
                  if n.split(".")[0] == "aiokafka" and n not in AIOKAFKA_PUBLIC]
    return found


def private_attribute_probes(tree: ast.AST, names: frozenset[str] | None = None
                             ) -> list[tuple[int, str]]:
    """``getattr``/``hasattr``/``setattr``/``delattr`` of a private attribute named by a string
    (one of ``names``, or any ``_name`` but dunders where ``names`` is None)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str):
            attr = node.args[1].value
            private = attr.startswith("_") and not attr.startswith("__")
            if (attr in names) if names is not None else private:
                found.append((node.lineno, attr))
    return found


def test_the_runtime_reaches_aiokafka_s_internal_modules_through_the_compat_module_only(
        ) -> None:
    found = [(name, *use) for name, path in modules().items()
             if name.startswith("runtime") and name != "runtime.kafka.aiokafka_compat"
             for use in aiokafka_internal_imports(ast.parse(path.read_text()))]
    assert not found, found


def test_no_private_aiokafka_attribute_is_read_by_name_outside_the_compat_module() -> None:
    """In the Kafka room no private attribute is probed by name at all (its objects are
    aiokafka's), nor are an object's attributes handed on by a ``__getattr__`` (a stand-in for
    one of aiokafka's objects); elsewhere none of aiokafka's internal names is probed."""
    found = []
    for name, path in modules().items():
        if name == "runtime.kafka.aiokafka_compat":
            continue
        tree = ast.parse(path.read_text())
        in_kafka = name.startswith("runtime.kafka")
        found += [(name, *use) for use in private_attribute_probes(
            tree, None if in_kafka else AIOKAFKA_INTERNALS)]
        if in_kafka:
            found += [(name, node.lineno, "__getattr__") for node in ast.walk(tree)
                      if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"]
    assert not found, found


def test_the_scans_see_aiokafka_internal_imports_and_private_probes() -> None:
    tree = ast.parse("import aiokafka\nfrom aiokafka import AIOKafkaClient, errors, protocol\n"
                     "from aiokafka.protocol.fetch import FetchRequest\nimport aiokafka.conn\n"
                     "from aiokafka.admin import NewTopic\nfrom aiokafka.structs import X\n"
                     "def f():\n    from aiokafka.client import ConnectionGroup\n"
                     "from aiokafka.admin.config_resource import ConfigResource\n")
    assert sorted(aiokafka_internal_imports(tree)) == [
        (2, "aiokafka.protocol"), (3, "aiokafka.protocol.fetch"), (4, "aiokafka.conn"),
        (8, "aiokafka.client"), (9, "aiokafka.admin.config_resource")]
    tree = ast.parse("getattr(c, '_coordinator', None)\nhasattr(x, '__len__')\n"
                     "getattr(getattr(c, '_client', c), '_conns')\nsetattr(b, '_x', 1)\n"
                     "getattr(o, name)\ngetattr(o, 'public')\n")
    assert sorted(private_attribute_probes(tree)) == [
        (1, "_coordinator"), (3, "_client"), (3, "_conns"), (4, "_x")]
    assert sorted(private_attribute_probes(tree, AIOKAFKA_INTERNALS)) == [
        (1, "_coordinator"), (3, "_client"), (3, "_conns")]


def tansu_section() -> str:
    """docs/testing.md, "The two test brokers": how tansu differs, and where the code meets it."""
    text = (ROOT / "docs" / "testing.md").read_text()
    start = text.index("## The two test brokers")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def test_every_runtime_module_that_works_around_tansu_is_named_where_tansu_s_ways_are_listed(
        ) -> None:
    """A workaround for tansu stays where it acts, says "tansu", and its module is named in the
    docs' list of tansu's differences, so that a reader finds them all from there."""
    section = tansu_section()
    found = [path.relative_to(ROOT).as_posix() for name, path in modules().items()
             if name.startswith("runtime") and "tansu" in path.read_text().lower()]
    assert found, "no module of runtime/ names tansu: the scan looks at the wrong files"
    missing = [p for p in found if f"`{p}`" not in section]
    assert not missing, f"not named in docs/testing.md, 'The two test brokers': {missing}"


def config_reads_by_name(tree: ast.AST) -> list[tuple[int, str]]:
    """Calls of ``config_value`` (a key read by string) but for a user's own ``user.*`` key, and
    imports of it: the job's own keys are read as fields of its ``JobConfig``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else "")
            if name != "config_value":
                continue
            key = node.args[1] if len(node.args) > 1 else None
            if isinstance(key, ast.Constant) and str(key.value).startswith("user."):
                continue
            found.append((node.lineno, ast.unparse(key) if key is not None else "?"))
        elif isinstance(node, ast.ImportFrom) and any(
                a.name == "config_value" for a in node.names):
            found.append((node.lineno, f"import from {node.module}"))
    return found


def test_the_job_s_config_is_read_by_field_outside_the_config_module() -> None:
    """Only samza_dsl/config.py reads a job's key by its name with ``config_value``; every other
    module reads the typed ``JobConfig`` (``samza_dsl.jobconfig``) built where the job is made."""
    found = [(name, *use) for name, path in modules().items() if name != "samza_dsl.config"
             for use in config_reads_by_name(ast.parse(path.read_text()))]
    assert not found, found


def test_the_scan_sees_config_reads_by_name() -> None:
    source = ("from samza_dsl.config import config_value\n"
              "a = config_value(c, 'task.commit.ms')\n"
              "b = config.config_value(\n    c, KEY)\n"
              "d = config_value(c, 'user.greeting')\n"
              "e = c.task.commit_ms\n")
    assert [line for line, _ in config_reads_by_name(ast.parse(source))] == [1, 2, 3]


#: the config modules: the key registry and the typed ``JobConfig`` it makes
CONFIG_MODULES = ("samza_dsl.config", "samza_dsl.jobconfig")


def _key_namespaces() -> tuple[str, ...]:
    """The namespaces of the job's own keys (``task.``, ``job.``, ``streams.``...), not
    ``user.``: a user's own keys are the user's to read from ``ctx.config``."""
    from samza_dsl.config import KNOWN_KEYS
    return tuple(sorted({k.split(".")[0] + "." for k in KNOWN_KEYS}
                        | {"streams.", "stores.", "systems."}))


def config_keys_asked_by_string(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a job's key, written as a string (or an f-string that starts with its namespace),
    is asked of a mapping: ``"key" in config``, ``config["key"]``, ``config.get("key")``. Such a
    read cannot tell a misspelt key, and repeats the registry's default; the typed parts give
    the value, and ``part.given(field)`` whether the config gave it."""
    namespaces = _key_namespaces()

    def is_key(node: ast.AST) -> bool:
        if isinstance(node, ast.JoinedStr) and node.values:
            node = node.values[0]
        return isinstance(node, ast.Constant) and isinstance(node.value, str) \
            and node.value.startswith(namespaces)

    def asks(node: ast.AST) -> bool:
        if isinstance(node, ast.Compare):  # "key" in config
            return is_key(node.left) and any(isinstance(op, ast.In | ast.NotIn)
                                             for op in node.ops)
        if isinstance(node, ast.Subscript):  # config["key"]
            return isinstance(node.ctx, ast.Load) and is_key(node.slice)
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("get", "pop", "setdefault") and bool(node.args) \
            and is_key(node.args[0])  # config.get("key")

    return [(node.lineno, ast.unparse(node)) for node in ast.walk(tree)  # type: ignore[attr-defined]
            if asks(node)]


def test_no_module_but_the_config_modules_asks_the_config_for_a_key_by_its_name() -> None:
    """Whether a key was given, and its value, are fields of the typed parts: no module outside
    the config modules asks a mapping for one of the job's keys by name."""
    found = [(name, *use) for name, path in modules().items() if name not in CONFIG_MODULES
             for use in config_keys_asked_by_string(ast.parse(path.read_text()))]
    assert not found, found


def test_the_scan_sees_keys_asked_by_string() -> None:
    source = ("a = 'metrics.reporter.interval.ms' not in runner.config\n"
              "b = config.get(f'streams.{sid}.samza.broadcast')\n"
              "c = f'stores.{name}.object.cache.size' in config\n"
              "d = config['task.commit.ms']\n"
              "e = ctx.config.get('user.greeting')\n"
              "page['metrics.reporters'] = 'snapshot'\n"
              "f = 'stream' in kinds\n"
              "g = config.metrics.given('reporter_interval_ms')\n")
    assert [line for line, _ in config_keys_asked_by_string(ast.parse(source))] == [1, 2, 3, 4]


#: the modules that run a job or a command on whatever system its streams are on
SYSTEM_BLIND = ["runtime/runner.py", "runtime/run_inputs.py", "runtime/ops/cli.py",
                "runtime/ops/ui.py"]


def test_the_runner_and_the_command_line_reach_a_system_through_its_protocol_only() -> None:
    """They import no system's room (``runtime.local``, ``runtime.kafka``) and pick no system
    by its name from ``SYSTEMS``: each asks the registry for the ``JobSystem`` of the
    application's streams, so a new system is its own room and one line in the registry."""
    for rel in SYSTEM_BLIND:
        tree = ast.parse((ROOT / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(("runtime.local", "runtime.kafka")), \
                    f"{rel}:{node.lineno} imports {node.module}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith(("runtime.local", "runtime.kafka")), \
                        f"{rel}:{node.lineno} imports {alias.name}"
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                    and node.value.id == "SYSTEMS":
                raise AssertionError(f"{rel}:{node.lineno} picks a system by name from SYSTEMS")
