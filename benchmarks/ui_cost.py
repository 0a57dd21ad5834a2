"""What the job page costs a job: W1L (``benchmarks/local_workloads.py``) with and without the
page open in a headless Chromium, runs interleaved, each in a fresh process.

    python benchmarks/ui_cost.py [--runs 3] [--scale 1.0]

A run with the page serves it from the job's process (``runtime.ops.ui``, as ``samza-dsl run --ui``
does) and opens it in Chromium, the plan drawn and two live updates shown, before the clock starts; the page stays open,
updated once a second, until the job ends. Prints one JSON line per run and the medians, and the page's cost in percent
of W1L's messages per second.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]


def one_run(n: int, page: bool, browse: bool = True) -> dict[str, Any]:
    from benchmarks.local_workloads import _config, _events, _ids, _load
    from examples.readwrite_counter import app
    from runtime.ops.ui import RunnerSource, UIServer
    from runtime.runner import LocalRunner

    d = tempfile.mkdtemp(prefix="w1l-ui-")
    pw = browser = server = None
    try:
        config = _config(d)
        assert _load(app, config, _events(_ids(n))) == n
        os.sync()
        runner = LocalRunner(app, config)
        updates = 0
        if page:
            from playwright.sync_api import sync_playwright

            # the plan up front: the page is open and drawn before the clock starts
            server = UIServer(RunnerSource(runner), app.plan(config=config),
                              "readwrite-counter-1")
            url = server.start()
        if page and browse:
            pw = sync_playwright().start()
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            tab = browser.new_page(viewport={"width": 1500, "height": 1000})
            tab.goto(url)
            tab.wait_for_function("() => document.querySelector('#dag svg') !== null",
                                  timeout=30_000)
            # open as a user leaves it: drawn, and updated live twice since (Chromium's start-up
            # work, parsing and the first paints, is over before the clock starts)
            seen = int(tab.evaluate("() => window.__updates || 0"))
            tab.wait_for_function(f"() => (window.__updates || 0) >= {seen + 2}", timeout=30_000)
        # in a thread of its own in both modes (Playwright holds this thread's event loop)
        t0 = time.perf_counter()
        runner.start()
        runner.wait()
        secs = time.perf_counter() - t0
        runner.stop()
        if page and browse:
            updates = int(tab.evaluate("() => window.__updates"))
        out = runner.container.status()["processed"] if runner.container else 0
        runner.close()
        return {"page": page, "messages": n, "seconds": round(secs, 3),
                "msgs_per_s": round(n / secs), "processed": out, "page_updates": updates}
    finally:
        if browser is not None:
            browser.close()
        if pw is not None:
            pw.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--one", choices=["page", "server", "none"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = max(1, int(1_000_000 * args.scale))
    if args.one:
        print(json.dumps(one_run(n, args.one != "none", browse=args.one == "page")), flush=True)
        return
    lines: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for _ in range(args.runs):
        for page in (False, True):  # interleaved: the machine's noise falls on both alike
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--one",
                                   "page" if page else "none", "--scale", str(args.scale)],
                                  capture_output=True, text=True, check=True)
            line = json.loads(proc.stdout.splitlines()[-1])
            print(json.dumps(line), flush=True)
            lines[page].append(line)
    without = statistics.median(x["msgs_per_s"] for x in lines[False])
    with_page = statistics.median(x["msgs_per_s"] for x in lines[True])
    # each pair ran back to back: the median of the pairs' costs is less exposed to the machine's
    # slow drifts than the difference of the two medians
    pairs = [100 * (a["msgs_per_s"] - b["msgs_per_s"]) / a["msgs_per_s"]
             for a, b in zip(lines[False], lines[True], strict=True)]
    print(json.dumps({"workload": "W1L", "runs": args.runs, "median_msgs_per_s_without_page":
                      round(without), "median_msgs_per_s_with_page": round(with_page),
                      "page_cost_percent": round(100 * (without - with_page) / without, 1),
                      "median_pair_cost_percent": round(statistics.median(pairs), 1)}))


if __name__ == "__main__":
    main()
