"""MkDocs hooks: the configuration and command-line references, written at build time from
``samza_dsl/config.py`` and the ``samza-dsl`` argument parser, so they cannot fall behind; and
``ExampleSections``, which shows a docstring's ``Example:`` section (the project's spelling) as
the doctest code that it is.

``mkdocs.yml`` names this file under ``hooks:`` and as a griffe extension of mkdocstrings;
``python docs/hooks.py configuration`` (or ``cli``) prints a page's Markdown."""

from __future__ import annotations

import argparse
import html
import re
import sys
from typing import Any

import griffe

PAGES = {"reference/configuration.md": "configuration", "reference/cli.md": "cli"}


def _cell(text: str) -> str:
    """Text for a Markdown table cell: no pipes, no HTML."""
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", " ")


def configuration_page() -> str:
    """Every key ``samza_dsl.config.key_reference`` lists: its type, default and meaning."""
    from samza_dsl.config import key_reference

    lines = [
        "# Configuration reference",
        "",
        "Every key a job reads, generated from `samza_dsl/config.py`. Give keys on the command",
        "line (`samza-dsl run APP -c task.max.concurrency=8`), to a runner",
        "(`LocalRunner(app, {\"task.max.concurrency\": 8})`) or to the application",
        "(`StreamApplication(\"name\", config={...})`); the runner's win. `samza-dsl config`",
        "prints the same list, and `samza-dsl config KEY` one key.",
        "",
        "A key nothing reads is an error that names the closest known key: put keys of your own",
        "under `user.`. In `streams.<id>.*`, `stores.<name>.*` and `systems.<name>.*`, `<id>` and",
        "`<name>` are a stream, store or system of the application, and the planner checks them.",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for row in key_reference():
        lines.append(f"| `{row.key}` | {row.type} | `{row.default}` | {_cell(row.meaning)} |")
    return "\n".join(lines) + "\n"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += f" {action.metavar or action.dest.upper()}"
        else:
            name = str(action.metavar or action.dest)
        meaning = action.help or ""
        if action.choices is not None and not isinstance(action.choices, dict):
            meaning += (" " if meaning else "") + "one of: " + ", ".join(map(str, action.choices))
        rows.append(f"| `{name}` | {_cell(meaning)} |")
    return rows


def cli_page() -> str:
    """Each subcommand of ``samza-dsl``: its description, usage and arguments."""
    from runtime.ops.cli import build_parser

    def wide(prog: str) -> argparse.HelpFormatter:
        return argparse.HelpFormatter(prog, width=96)

    parser = build_parser()
    lines = ["# Command-line reference", "",
             "Generated from the `samza-dsl` argument parser (`runtime/ops/cli.py`); "
             "`samza-dsl COMMAND --help` prints the same.", "",
             f"{parser.description}.", "", "| argument | meaning |", "|---|---|",
             *_argument_rows(parser), ""]
    for name, sub in _subcommands(parser).items():
        sub.formatter_class = wide
        # continuation lines are indented under "usage: samza-dsl NAME "; "usage: " goes
        usage = "\n".join(line[len("usage: "):] if line.startswith(" ") else line
                          for line in sub.format_usage().strip().splitlines())
        usage = usage.removeprefix("usage: ")
        lines += [f"## samza-dsl {name}", "", _cell(sub.description or ""), "", "```text",
                  usage, "```", "", "| argument | meaning |", "|---|---|",
                  *_argument_rows(sub), ""]
    return "\n".join(lines)


def page(name: str) -> str:
    return {"configuration": configuration_page, "cli": cli_page}[name]()


_SECTION = re.compile(r"^(\s*)Examples?:[ \t]*$")


def as_example_sections(doc: str) -> str:
    """A docstring whose examples griffe shows as doctest code: ``Example:`` read as Google
    style's ``Examples:`` section, and a run of ``>>>`` lines outside any such section put in
    one (else it is Markdown: ``>>>`` a quote, ``[1, 2]`` a link). tests/test_docs_site.py
    shows what it makes.
    """
    out: list[str] = []
    section: int | None = None  # the indent of the Examples: header we are under
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        if line.strip() and section is not None and indent <= section:
            section = None
        header = _SECTION.match(line)
        if header:
            section = len(header.group(1))
            out.append(f"{header.group(1)}Examples:")
        elif line.lstrip().startswith(">>>") and section is None:
            out.append(" " * indent + "Examples:")
            while i < len(lines) and lines[i].strip():
                out.append("    " + lines[i])
                i += 1
            continue
        else:
            out.append(line)
        i += 1
    return "\n".join(out)


class ExampleSections(griffe.Extension):
    """Shows every docstring's doctests as code (``as_example_sections``)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = as_example_sections(obj.docstring.value)


def on_files(files: Any, config: Any) -> Any:
    """Adds the generated pages to the site (MkDocs hook)."""
    from mkdocs.structure.files import File

    for uri, name in PAGES.items():
        files.append(File.generated(config, uri, content=page(name)))
    return files


if __name__ == "__main__":
    print(page(sys.argv[1] if len(sys.argv) > 1 else "configuration"), end="")
