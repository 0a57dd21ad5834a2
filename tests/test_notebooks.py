"""Runs every notebook in notebooks/ top to bottom and fails on any cell error.

The kernel is this interpreter (the venv's python, which has samza-dsl and ipykernel installed),
named through a kernelspec written to a temporary directory: a ``python3`` kernelspec elsewhere on
the machine, pointing at another Python, cannot take its place. Each notebook runs with
notebooks/ as its working directory, as it would in Jupyter.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
KERNEL_NAME = "samza-dsl-test-python"
CELL_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def kernel_spec_manager(tmp_path_factory: pytest.TempPathFactory) -> KernelSpecManager:
    kernels = tmp_path_factory.mktemp("jupyter") / "kernels"
    spec_dir = kernels / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python {sys.version_info.major}.{sys.version_info.minor} (samza-dsl tests)",
        "language": "python",
        "metadata": {"debugger": False},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return KernelSpecManager(kernel_dirs=[str(kernels)], ensure_native_kernel=False)


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOK_DIR}"
    assert NOTEBOOK_DIR / "01_plan.ipynb" in NOTEBOOKS


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, kernel_spec_manager: KernelSpecManager) -> None:
    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=kernel_spec_manager)
    client = NotebookClient(nb, km=km, kernel_name=KERNEL_NAME, timeout=CELL_TIMEOUT_S,
                            allow_errors=False, resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    # the kernel as Jupyter starts it: without pytest's marker, which stops ipykernel from
    # showing what the process (Spark's JVM, say) writes on its standard error
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    client.execute(env=env)  # raises CellExecutionError, naming the cell, on the first error

    errors = [out for cell in nb.cells if cell.cell_type == "code"
              for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors
    # nothing red: no warnings from Spark's JVM or from Python on standard error
    stderr = [(i, out.get("text", "")) for i, cell in enumerate(nb.cells)
              if cell.cell_type == "code" for out in cell.get("outputs", [])
              if out.get("output_type") == "stream" and out.get("name") == "stderr"]
    assert not stderr, f"{path.name} wrote to standard error: {stderr}"
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.get("execution_count") for cell in code_cells), "a code cell did not run"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_saved_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert not cell.get("outputs"), f"{path.name} cell {i} was saved with outputs: clear them"
        assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"
