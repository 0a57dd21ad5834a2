"""The job page in a real browser: Debian's headless Chromium driven by Playwright, what the page
shows read from it, and its screenshots kept in ``artifacts/job-page/`` (ignored by git; CI keeps
the folder; ``./dev test`` names it)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
#: where the screenshots go
ARTIFACTS = ROOT / "artifacts" / "job-page"
#: the size the page must be readable at without scrolling
VIEWPORT = {"width": 1400, "height": 1000}


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert os.path.exists(CHROMIUM), f"the job page is tested in Chromium: install {CHROMIUM}"
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def screenshot(page: Any, name: str) -> Path:
    """The page as it is now, at the viewport's size, as ``artifacts/job-page/<name>.png``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    assert path.stat().st_size > 10_000, path
    return path


def drawn(page: Any) -> dict[str, Any]:
    """What the page shows: its stage boxes (their labels), the snapshot it draws (``state``),
    the headline as the page writes it and as ``fmt`` writes the snapshot's numbers, each
    input row's partition cells, and whether it says it waits for the plan."""
    got: dict[str, Any] = page.evaluate("""() => ({
        stages: [...document.querySelectorAll('#dag svg g.cluster')].map(
            g => [...g.querySelectorAll(':scope > text')].map(t => t.textContent).join('\\n')),
        nodes: [...document.querySelectorAll('#dag svg g.node')].map(g => g.id),
        waiting: document.getElementById('dag').textContent.includes('waiting'),
        state: window.__state || null,
        updates: window.__updates || 0,
        shown: {behind: document.getElementById('behind')?.textContent,
                rate: document.getElementById('rate')?.textContent,
                lag: document.getElementById('cplag')?.textContent},
        expected: window.__state?.headline ? {behind: fmt(window.__state.headline.behind),
                                    rate: fmt(window.__state.headline.rate),
                                    lag: fmt(window.__state.headline.lag)} : null,
        cells: Object.fromEntries([...document.querySelectorAll('#inputs tbody tr[data-stream]')]
            .map(r => [r.dataset.stream, r.querySelectorAll('svg.strip rect').length])),
    })""")
    return got


def inside_viewport(page: Any, selector: str) -> tuple[bool, dict[str, float]]:
    """Whether the element's bounding box lies within the viewport (no scrolling), and the box."""
    box: dict[str, float] = page.evaluate("""(sel) => {
        const r = document.querySelector(sel).getBoundingClientRect();
        return {top: r.top, bottom: r.bottom, left: r.left, right: r.right,
                width: innerWidth, height: innerHeight, scroll: scrollY}}""", selector)
    ok = box["top"] >= 0 and box["left"] >= 0 and box["bottom"] <= box["height"] \
        and box["right"] <= box["width"] and box["scroll"] == 0
    return ok, box


def status_json(app: str, *config: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """``samza-dsl status APP --json`` (``config``: ``-c`` arguments), as the command gives it."""
    out = subprocess.run([sys.executable, "-m", "runtime.ops.cli", "status", app, "--json",
                          *config], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    assert out.returncode == 0, out.stderr
    got: dict[str, Any] = json.loads(out.stdout)
    return got


def status_numbers(status: dict[str, Any], partitions: set[tuple[str, int]] | None = None
                   ) -> dict[tuple[str, int], tuple[int, int]]:
    """(stream, partition) -> (lag since the checkpoint, end offset) from a status's rows; only
    ``partitions`` where given."""
    return {(r["stream"], int(r["partition"])): (r["lag"], r["end_offset"])
            for r in status["partitions"]
            if partitions is None or (r["stream"], int(r["partition"])) in partitions}


def page_numbers(state: dict[str, Any], kind: str = "input"
                 ) -> dict[tuple[str, int], tuple[int, int]]:
    """The same from a snapshot the page draws, over its streams of ``kind``."""
    return {(p["stream"], int(p["partition"])): (p["lag"], p["end"])
            for p in state["partitions"] if p["kind"] == kind}
