"""The notebooks in notebooks/ use only the public API, run top to bottom, and are committed with
the outputs a fresh run gives.

- Imports: a notebook may import anything outside this project (the standard library, pandas,
  matplotlib, the examples in ../examples), but from the project only the public API that
  docs/reference/api.md documents: ``samza_dsl`` and its modules, and the runners
  (``runtime.runner.LocalRunner``, ``runtime.spark`` and ``planner.ExecutionPlan``), and only the
  names those modules export. ``samza_dsl.testing.TestRunner``, not ``runtime.testing``.
- Outputs: each notebook is executed afresh, and each code cell's text outputs (standard output
  and the ``text/plain`` of results and displays) must equal the committed ones. Images, HTML and
  SVG are not compared (graphviz and matplotlib draw them differently from version to version).
  Before comparing, both sides go through ``normalise``, which replaces exactly three volatile
  things: a measured duration (a number with a fraction followed by ``s``, ``ms`` or ``µs``, as in
  "in 0.9 s"; whole numbers, such as a window's "10000ms", stay), a path under the temporary
  directory, and a memory address (``0x`` and 6 or more hex digits).

To save fresh outputs after changing a notebook or what it shows, run
``.venv/bin/python tests/test_notebooks.py [NOTEBOOK ...]`` and look at the diff before committing.

The kernel is this interpreter (the venv's python, which has samza-dsl and ipykernel installed),
named through a kernelspec written to a temporary directory: a ``python3`` kernelspec elsewhere on
the machine, pointing at another Python, cannot take its place. Each notebook runs with
notebooks/ as its working directory, as it would in Jupyter.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
KERNEL_NAME = "samza-dsl-test-python"
CELL_TIMEOUT_S = 180
SAVE_HINT = ("run `.venv/bin/python tests/test_notebooks.py {name}` to save fresh outputs, "
             "and look at the diff before committing")

# this project's top-level packages: an import from one of them must be public
PROJECT_PACKAGES = {"samza_dsl", "planner", "operators", "runtime"}
# the runners and the plan, as docs/reference/api.md documents them: module -> the names a user
# imports from it (None: the module's __all__); every module of samza_dsl is public too
RUNNER_MODULES: dict[str, set[str] | None] = {
    "runtime.runner": {"LocalRunner"},
    "runtime.spark": None,
    "planner": {"ExecutionPlan"},
}

# measured times are printed with a fraction ("in 0.9 s"); configured ones, such as a window's
# "10000ms" or "ttl=1800000ms", are whole numbers and stay
_DURATION = re.compile(r"(?<![\w.])\d[\d,]*\.\d+\s?(?:s|ms|µs)\b")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")


def _tmp_path_pattern() -> re.Pattern[str]:
    roots = {tempfile.gettempdir(), "/tmp"}
    alternatives = "|".join(re.escape(root.rstrip("/")) for root in sorted(roots, key=len, reverse=True))
    return re.compile(rf"(?:{alternatives})/[^\s'\"/]+")


_TMP_PATH = _tmp_path_pattern()


def normalise(text: str) -> str:
    """``text`` with its durations, temporary paths and memory addresses replaced."""
    text = _TMP_PATH.sub("<tmp>", text)
    text = _DURATION.sub("<duration>", text)
    return _ADDRESS.sub("0x<address>", text)


def text_outputs(cell: Any) -> list[tuple[str, str]]:
    """A code cell's outputs that are compared, as (kind, normalised text): standard output (the
    chunks a run happens to split it into joined) and the ``text/plain`` of results and
    displays."""
    out: list[tuple[str, str]] = []
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "stream" and output.get("name") == "stdout":
            if out and out[-1][0] == "stdout":
                out[-1] = ("stdout", out[-1][1] + output.get("text", ""))
            else:
                out.append(("stdout", output.get("text", "")))
        elif kind in ("execute_result", "display_data"):
            out.append((kind, output.get("data", {}).get("text/plain", "")))
    return [(kind, normalise(text)) for kind, text in out]


def _public_names(module_name: str) -> set[str] | None:
    """The names a notebook may import from ``module_name``, or None if it is not public."""
    if module_name in RUNNER_MODULES:
        names = RUNNER_MODULES[module_name]
        return set(importlib.import_module(module_name).__all__) if names is None else names
    if module_name == "samza_dsl" or module_name.startswith("samza_dsl."):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return None
        return set(getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")]))
    return None


def _is_public_module(module_name: str) -> bool:
    return _public_names(module_name) is not None


def private_imports(source: str) -> list[str]:
    """What a code cell imports from this project beyond its public API, one line each.

    IPython magics (``%matplotlib inline``) are turned into Python first, as the kernel does."""
    tree = ast.parse(TransformerManager().transform_cell(source))
    bad: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PROJECT_PACKAGES and not _is_public_module(alias.name):
                    bad.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or module.split(".")[0] not in PROJECT_PACKAGES:
                if node.level:
                    bad.append(f"line {node.lineno}: a relative import")
                continue
            names = _public_names(module)
            for alias in node.names:
                if names is None:
                    bad.append(f"line {node.lineno}: from {module} import {alias.name}")
                elif alias.name not in names and not _is_public_module(f"{module}.{alias.name}"):
                    bad.append(f"line {node.lineno}: from {module} import {alias.name} "
                               f"({alias.name!r} is not in {module}.__all__)")
    return bad


def code_cells(nb: Any) -> Iterator[tuple[int, Any]]:
    return ((i, cell) for i, cell in enumerate(nb.cells) if cell.cell_type == "code")


def write_kernel_spec(kernels: Path) -> KernelSpecManager:
    spec_dir = kernels / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python {sys.version_info.major}.{sys.version_info.minor} (samza-dsl tests)",
        "language": "python",
        "metadata": {"debugger": False},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return KernelSpecManager(kernel_dirs=[str(kernels)], ensure_native_kernel=False)


def execute(path: Path, kernel_spec_manager: KernelSpecManager) -> Any:
    """``path`` read and run top to bottom in a fresh kernel; the first cell error is raised
    (nbclient's CellExecutionError names the cell)."""
    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=kernel_spec_manager)
    client = NotebookClient(nb, km=km, kernel_name=KERNEL_NAME, timeout=CELL_TIMEOUT_S,
                            allow_errors=False, record_timing=False,
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    # the kernel as Jupyter starts it: without pytest's marker, which stops ipykernel from
    # showing what the process (Spark's JVM, say) writes on its standard error
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    try:
        client.execute(env=env)
    finally:
        if km.has_kernel:  # nbclient leaves a kernel manager it was given running
            km.shutdown_kernel(now=True)
    return nb


@pytest.fixture(scope="module")
def kernel_spec_manager(tmp_path_factory: pytest.TempPathFactory) -> KernelSpecManager:
    return write_kernel_spec(tmp_path_factory.mktemp("jupyter") / "kernels")


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOK_DIR}"
    assert NOTEBOOK_DIR / "01_plan.ipynb" in NOTEBOOKS


def test_the_runner_modules_are_the_documented_ones() -> None:
    documented = set(re.findall(r"^::: ([\w.]+)", (REPO / "docs/reference/api.md").read_text(), re.M))
    for module, names in RUNNER_MODULES.items():
        wanted = {module} if names is None else {f"{module}.{name}" for name in names}
        assert wanted <= documented, f"docs/reference/api.md does not document {wanted - documented}"


@pytest.mark.parametrize(("text", "normalised"), [
    ("wrote 200,000 views in 0.9 s:", "wrote 200,000 views in <duration>:"),
    ("reprocessed in 1,234.5 s, 12.0ms a batch", "reprocessed in <duration>, <duration> a batch"),
    ("removed /tmp/samza-dsl-reprocess-j29zzk8f/counts.jsonl", "removed <tmp>/counts.jsonl"),
    ("<Thing at 0x7f3a2b1c9d00>", "<Thing at 0x<address>>"),
    # what a plan or a run shows stays: window sizes, TTLs, sizes, counts, figure sizes
    ("keyed_tumbling 10000ms event-time ttl=1800000ms 4.2 MB", None),
    ("<Figure size 1000x450 with 1 Axes> 1700000040.02 {'views': 509}", None),
])
def test_normalise_replaces_only_what_changes_from_run_to_run(text: str, normalised: str | None) -> None:
    assert normalise(text) == (text if normalised is None else normalised)


@pytest.mark.parametrize(("source", "bad"), [
    ("from samza_dsl.testing import TestRunner\nimport samza_dsl.serdes", []),
    ("from runtime.spark import SparkRunner, spark_session\nfrom planner import ExecutionPlan", []),
    ("%matplotlib inline\nimport pandas as pd\nfrom collections import Counter", []),
    ("from runtime.testing import TestRunner", ["line 1: from runtime.testing import TestRunner"]),
    ("from runtime.spark.progress import StageProgress",
     ["line 1: from runtime.spark.progress import StageProgress"]),
    ("import operators.window", ["line 1: import operators.window"]),
    ("from planner import plan", ["line 1: from planner import plan ('plan' is not in planner.__all__)"]),
    ("from samza_dsl.testing import _run", ["line 1: from samza_dsl.testing import _run "
                                            "('_run' is not in samza_dsl.testing.__all__)"]),
    ("def f():\n    import runtime.engine.task", ["line 2: import runtime.engine.task"]),
])
def test_private_imports_are_found(source: str, bad: list[str]) -> None:
    assert private_imports(source) == bad


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_imports_only_the_public_api(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    bad = [f"cell {i} {line}" for i, cell in code_cells(nb) for line in private_imports(cell.source)]
    assert not bad, (f"{path.name} imports what is not public API (use samza_dsl, samza_dsl.testing, "
                     f"runtime.runner, runtime.spark): {'; '.join(bad)}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_saved_with_the_outputs_of_one_run(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    hint = SAVE_HINT.format(name=path.relative_to(REPO))
    counts = [cell.get("execution_count") for _, cell in code_cells(nb)]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.name} was not saved after one run from the top (execution counts {counts}): {hint}")
    for i, cell in code_cells(nb):
        for output in cell.get("outputs", []):
            assert output.get("output_type") != "error", f"{path.name} cell {i} saved an error"
            assert output.get("name") != "stderr", f"{path.name} cell {i} saved standard error"
    text = json.dumps([cell.get("outputs", []) for _, cell in code_cells(nb)])
    for machine_path in {str(REPO), str(Path.home())}:
        assert machine_path not in text, f"{path.name} has {machine_path} in its outputs: {hint}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_and_gives_its_committed_outputs(path: Path,
                                                       kernel_spec_manager: KernelSpecManager) -> None:
    committed = nbformat.read(path, as_version=4)
    fresh = execute(path, kernel_spec_manager)
    # nothing red: no warnings from Spark's JVM or from Python on standard error
    stderr = [(i, out.get("text", "")) for i, cell in code_cells(fresh)
              for out in cell.get("outputs", [])
              if out.get("output_type") == "stream" and out.get("name") == "stderr"]
    assert not stderr, f"{path.name} wrote to standard error: {stderr}"
    assert all(cell.get("execution_count") for _, cell in code_cells(fresh)), "a cell did not run"

    hint = SAVE_HINT.format(name=path.relative_to(REPO))
    assert len(committed.cells) == len(fresh.cells)
    for (i, saved), (_, now) in zip(code_cells(committed), code_cells(fresh), strict=True):
        want, got = text_outputs(saved), text_outputs(now)
        if want != got:
            diff = difflib.unified_diff(
                [f"{kind}: {line}" for kind, text in want for line in text.splitlines()],
                [f"{kind}: {line}" for kind, text in got for line in text.splitlines()],
                "committed", "fresh run", lineterm="", n=1)
            pytest.fail(f"{path.name} cell {i} gives other outputs than the committed ones:\n"
                        + "\n".join(list(diff)[:40]) + f"\n{hint}")


def save(paths: list[Path]) -> None:
    """Run each notebook and save it with its outputs, under the plain ``python3`` kernel name
    that Jupyter opens it with."""
    with tempfile.TemporaryDirectory() as tmp:
        ksm = write_kernel_spec(Path(tmp) / "kernels")
        for path in paths:
            nb = execute(path, ksm)
            nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)",
                                         "language": "python", "name": "python3"}
            nbformat.write(nb, path)
            print(f"saved {path.relative_to(REPO)} with its outputs")


if __name__ == "__main__":
    save([Path(arg).resolve() for arg in sys.argv[1:]] or NOTEBOOKS)
