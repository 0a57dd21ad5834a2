"""The documentation holds: the API reference builds from the docstrings, and every file the
README, the docs and the code's docstrings cite exists."""

from __future__ import annotations

import re
import runpy
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# a repository path as the docs cite it: a top-level folder, then a file with an extension
_CITED = re.compile(
    r"(?<![\w./-])((?:docs|examples|benchmarks|notebooks|tests|runtime|planner|operators|"
    r"samza_dsl|\.ci)/[\w./-]*?\.(?:py|md|ipynb|toml|json|jsonl|txt|html))(?![\w/-])")
_SOURCES = ["README.md", "docs", "examples", "benchmarks", "samza_dsl", "planner", "operators",
            "runtime", "notebooks"]
# paths that name a file the reader makes, not one the repository holds
_MADE_BY_READER = re.compile(r"^(docs/api/|out/|history/)")


def _cited() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for source in _SOURCES:
        path = ROOT / source
        files = [path] if path.is_file() else [
            p for p in path.rglob("*") if p.suffix in (".py", ".md", ".ipynb")
            and "__pycache__" not in p.parts and "api" not in p.relative_to(ROOT).parts[:2]]
        for f in files:
            for m in _CITED.finditer(f.read_text(encoding="utf-8", errors="replace")):
                out.setdefault(m.group(1), set()).add(str(f.relative_to(ROOT)))
    return out


def test_every_cited_file_exists() -> None:
    cited = _cited()
    assert "docs/operations.md" in cited  # the scan finds citations at all
    missing = {p: sorted(where) for p, where in cited.items()
               if not _MADE_BY_READER.match(p) and not (ROOT / p).exists()}
    assert not missing, f"cited but missing (path: where cited): {missing}"


def test_the_api_reference_builds_from_the_docstrings(tmp_path: Any) -> None:
    build = runpy.run_path(str(ROOT / "docs" / "build_api.py"))["build"]
    problems = build(tmp_path)
    assert problems == []
    pages = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.html")}
    for page in ("samza_dsl.html", "runtime/runner.html", "runtime/spark.html",
                 "runtime/testing.html", "samza_dsl/systems.html", "planner.html"):
        assert page in pages, sorted(pages)
    text = (tmp_path / "samza_dsl.html").read_text()
    assert "StreamApplication" in text and "MessageStream" in text
    assert "SparkRunner" in (tmp_path / "runtime" / "spark.html").read_text()


# a page cited by its bare name (``semantics.md``, ``ARCHITECTURE.md``), in the code or the docs
_BARE = re.compile(r"(?<![\w./-])([A-Za-z][\w-]*\.md)(?:#[\w-]+)?(?![\w/-])")
# a docs page with a section named in quotes after it: docs/x.md, "Section"
_SECTION = re.compile(r"(docs/[\w-]+\.md)[,:]? (?:section )?\"([^\"]+)\"")
_SKIP_BARE = {"README.md"}


def _texts() -> list[tuple[str, str]]:
    out = []
    for source in _SOURCES:
        path = ROOT / source
        files = [path] if path.is_file() else [
            p for p in path.rglob("*") if p.suffix in (".py", ".md")
            and "__pycache__" not in p.parts and "api" not in p.relative_to(ROOT).parts[:2]]
        out.extend((str(f.relative_to(ROOT)), f.read_text(encoding="utf-8", errors="replace"))
                   for f in files)
    return out


def test_every_page_cited_by_its_name_exists() -> None:
    """A page named bare must be one of docs/ (or at the top of the repository): no citation of
    a page the project does not hold."""
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} | {
        p.name for p in ROOT.glob("*.md")}
    missing = {}
    for where, text in _texts():
        for m in _BARE.finditer(text):
            name = m.group(1)
            if name not in pages and name not in _SKIP_BARE:
                missing.setdefault(name, set()).add(where)
    assert not missing, f"cited but not a page of the project: {missing}"


def test_every_section_cited_by_its_title_exists() -> None:
    """``docs/x.md, "A section"``: the page has a heading of that title."""
    headings: dict[str, set[str]] = {}
    for page in (ROOT / "docs").glob("*.md"):
        text = page.read_text()
        headings[f"docs/{page.name}"] = {
            line.lstrip("#").strip().strip("`") for line in text.splitlines()
            if line.startswith("#")} | {  # a bold lead of a paragraph or item is a section too
            m.group(1).rstrip(".:") for m in re.finditer(r"^\s*(?:[-*] )?\*\*([^*\n]+)\*\*", text,
                                                          re.MULTILINE)}
    wrong = []
    for where, text in _texts():
        for m in _SECTION.finditer(text.replace("\n", " ")):
            page, title = m.group(1), " ".join(m.group(2).split())
            if page in headings and not any(h == title or h.startswith(title)
                                            for h in headings[page]):
                wrong.append((where, page, title))
    assert not wrong, f"sections cited that their page does not have: {wrong}"
