"""The docs site builds with ``mkdocs build --strict`` (a broken link, a missing page or a
docstring mkdocstrings cannot render fails it), its generated references list every config key
and every subcommand, and its getting-started and API pages look right in a real headless
Chromium. ``SAMZA_DOCS_SCREENSHOTS=DIR`` keeps the screenshots in DIR."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.ops.cli import build_parser
from samza_dsl.config import key_reference
from tests.page_helpers import chromium

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    mkdocs = Path(sys.executable).parent / "mkdocs"
    started = time.monotonic()
    proc = subprocess.run([str(mkdocs), "build", "--strict", "--site-dir", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    took = time.monotonic() - started
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    assert took < 60, f"the site took {took:.0f} s to build"
    return out


def test_the_site_builds_strict_with_every_page(site: Path) -> None:
    for page in ("index.html", "getting-started/index.html", "testing/index.html",
                 "kafka/index.html", "benchmarks/index.html", "reference/api/index.html",
                 "reference/configuration/index.html", "reference/cli/index.html"):
        assert (site / page).is_file(), page


def test_the_configuration_reference_lists_every_key(site: Path) -> None:
    text = (site / "reference" / "configuration" / "index.html").read_text()
    for row in key_reference():
        key = row.key.replace("<", "&lt;").replace(">", "&gt;")
        assert f"<code>{key}</code>" in text, row.key
    assert "messages in flight per task" in text


def test_the_cli_reference_has_every_subcommand_and_option(site: Path) -> None:
    text = (site / "reference" / "cli" / "index.html").read_text()
    parser = build_parser()
    subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sub in subs.choices.items():
        assert f"samza-dsl {name}" in text, name
        for action in sub._actions:
            for option in action.option_strings:
                assert option in text, f"samza-dsl {name} {option}"
    assert "--version" in text


def test_the_api_reference_shows_the_runners_and_their_examples(site: Path) -> None:
    text = (site / "reference" / "api" / "index.html").read_text()
    for name in ("StreamApplication", "MessageStream", "LocalRunner", "TestRunner", "TestResult",
                 "SparkRunner", "partitioned_messages", "ExecutionPlan", "KafkaSystem"):
        assert f'id="{name}' in text or f".{name}\"" in text, name
    # doctests render as code, not as quoted Markdown
    assert "<blockquote>\n<blockquote>" not in text
    assert 'class="language-pycon' in text or "gp\">&gt;&gt;&gt;" in text


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


def _look(browser: Any, url: str, shot: Path) -> dict[str, Any]:
    """Opens ``url`` at a laptop's size, saves a screenshot of the first screen to ``shot`` and
    returns what a reader would see."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    failed: list[str] = []
    page.on("requestfailed", lambda r: failed.append(r.url))
    response = page.goto(url, wait_until="networkidle")
    page.screenshot(path=str(shot))
    seen = page.evaluate("""() => ({
        title: document.querySelector('article h1')?.textContent ?? '',
        nav: [...document.querySelectorAll('.md-nav--primary .md-nav__link')]
                 .filter(a => a.offsetParent !== null).map(a => a.textContent.trim()),
        code: document.querySelectorAll('article .highlight').length,
        overflow: document.documentElement.scrollWidth > document.documentElement.clientWidth,
        headings: [...document.querySelectorAll('article h2, article h3')]
                      .map(h => h.textContent.trim()),
    })""")
    keep = os.environ.get("SAMZA_DOCS_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)
    page.close()
    return {**seen, "status": response.status, "errors": errors, "failed": failed}


def test_getting_started_in_chromium(browser: Any, served: str, tmp_path: Path) -> None:
    shot = tmp_path / "getting-started.png"
    seen = _look(browser, f"{served}/getting-started/", shot)
    assert seen["status"] == 200 and not seen["errors"] and not seen["failed"], seen
    assert seen["title"].startswith("Getting started")
    assert {"Install", "Write the job", "A property test", "Run it"} <= {
        h.rstrip("¶") for h in seen["headings"]}
    assert seen["code"] >= 5 and not seen["overflow"]
    assert "Concepts" in seen["nav"] and "Testing" in seen["nav"]
    assert shot.stat().st_size > 20_000


def test_the_api_reference_in_chromium(browser: Any, served: str, tmp_path: Path) -> None:
    shot = tmp_path / "api.png"
    seen = _look(browser, f"{served}/reference/api/", shot)
    assert seen["status"] == 200 and not seen["errors"] and not seen["failed"], seen
    assert seen["title"].startswith("API reference")
    headings = " ".join(seen["headings"])
    for name in ("StreamApplication", "LocalRunner", "TestRunner", "SparkRunner"):
        assert name in headings, name
    assert seen["code"] >= 20 and not seen["overflow"]
    assert shot.stat().st_size > 20_000


def test_doctests_outside_a_section_are_put_in_one() -> None:
    import runpy

    hooks = runpy.run_path(str(REPO / "docs" / "hooks.py"))
    doc = "Text.\n\n>>> 1 + 1\n2\n\nMore.\n\nExample:\n    >>> 2\n    2"
    assert hooks["as_example_sections"](doc).splitlines() == [
        "Text.", "", "Examples:", "    >>> 1 + 1", "    2", "", "More.", "", "Examples:",
        "    >>> 2", "    2"]
