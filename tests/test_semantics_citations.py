"""Every rule the code and docs cite is stated in docs/semantics.md, which numbers its rules
1..N without a gap, and citations name that file (the design notes it was written from are not
part of the repository)."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEMANTICS = ROOT / "docs" / "semantics.md"
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".hypothesis", "build",
             "dist", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".ipynb_checkpoints"}
SUFFIXES = {".py", ".md", ".ipynb", ".toml", ".txt", ".rst"}
# "rule 8", "rules 8 and 15", "rules 5, 11-15", "Rule 2(c)", "rules 7-10 and 15"
NUMBER = r"\d+(?:\([a-z]\))?"
CITATION = re.compile(rf"\b[Rr]ules? ({NUMBER}(?:(?:, | and | or |-|–| to ){NUMBER})*)")
STATED = re.compile(r"^\*\*Rule (\d+)\.\*\*", re.MULTILINE)


def stated_rules() -> list[int]:
    return [int(n) for n in STATED.findall(SEMANTICS.read_text(encoding="utf-8"))]


def cited(text: str) -> set[int]:
    """The rule numbers ``text`` cites; a range ``a-b`` cites every rule from a to b."""
    out: set[int] = set()
    for match in CITATION.finditer(text):
        parts = re.split(r"(, | and | or |-|–| to )", match.group(1))
        numbers = [int(re.match(r"\d+", p).group()) for p in parts[::2]]  # type: ignore[union-attr]
        out.update(numbers)
        for i, sep in enumerate(parts[1::2]):
            if sep in ("-", "–", " to "):
                out.update(range(numbers[i], numbers[i + 1] + 1))
    return out


def sources() -> list[Path]:
    files = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames
                       if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        files.extend(Path(dirpath) / f for f in filenames if Path(f).suffix in SUFFIXES)
    return sorted(files)


def test_the_rules_are_numbered_from_1_without_a_gap() -> None:
    rules = stated_rules()
    assert rules == list(range(1, len(rules) + 1)), rules
    assert len(rules) >= 18


def test_every_cited_rule_is_stated_in_docs_semantics() -> None:
    rules = set(stated_rules())
    wrong = {}
    total = 0
    for path in sources():
        numbers = cited(path.read_text(encoding="utf-8", errors="replace"))
        total += len(numbers)
        if numbers - rules:
            wrong[str(path.relative_to(ROOT))] = sorted(numbers - rules)
    assert not wrong, f"rules cited but not stated in docs/semantics.md: {wrong}"
    assert total > 50  # the scan found the citations


def test_citations_name_docs_semantics() -> None:
    stale = [f"{path.relative_to(ROOT)}:{i}"
             for path in sources() if path != Path(__file__).resolve()
             for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace")
                                      .splitlines(), 1)
             if re.search(r"\bSEMANTICS(\.md)? rules? \d", line)]
    assert not stale, f"cite docs/semantics.md rule N, not SEMANTICS.md: {stale}"


def test_modules_cite_the_rule_they_implement() -> None:
    """Where a module implements one rule, its docstring cites that rule."""
    rules = {"planner/partitions.py": 2, "planner/validate.py": 3, "operators/join.py": 9,
             "operators/join_table.py": 10, "operators/late.py": 8, "runtime/engine/elastic.py": 18,
             "runtime/kafka/changelog.py": 17, "runtime/engine/commit.py": 16}
    for module, rule in rules.items():
        head = (ROOT / module).read_text(encoding="utf-8")[:600]
        assert rule in cited(head), (module, rule)
        assert f"docs/semantics.md rule {rule}" in head or "docs/semantics.md rules" in head, module


def test_the_citation_parser() -> None:
    assert cited("rules 5, 11-15 and rule 2(c); Rule 8") == {2, 5, 8, 11, 12, 13, 14, 15}
    assert cited("rules 7-10 and 15, rules 8 and 18") == {7, 8, 9, 10, 15, 18}
    assert cited("no rule here, nor rules") == set()
