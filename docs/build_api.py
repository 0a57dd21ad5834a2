"""Builds the API reference (HTML, with pdoc) from the public modules' docstrings.

    python docs/build_api.py [-o docs/api]

(The docs site, ``./dev docs``, has the same reference through mkdocstrings.)

A module that does not import, or a name in ``__all__`` that does not resolve, fails the build,
so the reference never silently loses a page."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

# The public API, as docs/reference/api.md presents it: what a user imports.
MODULES = [
    "samza_dsl",
    "samza_dsl.systems",
    "samza_dsl.connectors",
    "samza_dsl.files",
    "samza_dsl.postgres",
    "samza_dsl.iceberg",
    "samza_dsl.serdes",
    "samza_dsl.safe_serde",
    "samza_dsl.windows",
    "samza_dsl.remote",
    "samza_dsl.late",
    "samza_dsl.context",
    "samza_dsl.errors",
    "samza_dsl.config",
    "samza_dsl.testing.strategies",
    "samza_dsl.testing.kv_service",
    "planner",
    "runtime.runner",
    "runtime.testing",
    "runtime.engine.late",
    "runtime.spark",
]


def build(out: Path) -> list[str]:
    """Writes the reference to ``out``; returns the problems pdoc reported (empty when clean)."""
    import pdoc
    import pdoc.render

    pdoc.render.configure(docformat="google", footer_text="samza-dsl API reference",
                          show_source=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*MODULES, output_directory=out)
    # An annotation pdoc cannot evaluate (on a function a decorator wrapped, as hypothesis's
    # ``@composite`` does) still shows, as written: not a problem of the reference.
    return [str(w.message) for w in caught
            if not str(w.message).startswith("Error parsing type annotation")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default="docs/api", help="output directory")
    args = parser.parse_args(argv)
    out = Path(args.output)
    problems = build(out)
    for p in problems:
        print(f"docs: {p}", file=sys.stderr)
    if problems:
        print(f"docs: {len(problems)} problem(s); the reference in {out} is incomplete",
              file=sys.stderr)
        return 1
    print(f"docs: API reference written to {out}/index.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
