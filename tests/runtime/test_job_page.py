"""The job page of a local job in Chromium at 1400 x 1000, as a new user opens it: the first
answer alone draws the plan (every stage, labelled with what runs it) and the numbers; the
headline is what ``samza-dsl status --json`` gives at that moment; a page opened before the job
has any data draws it when it comes, without a reload; an input of 64 partitions is one row and
leaves the operators and streams in view. A screenshot of each goes to ``artifacts/job-page/``."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tests.page_helpers import (
    VIEWPORT,
    chromium,
    drawn,
    inside_viewport,
    page_numbers,
    screenshot,
    status_json,
    status_numbers,
)
from tests.runtime.test_ui import CLICKS, _clicks_sample, cli, free_port, get_json, stop, wait_for


def _stages(app_ref: str, job_dir: Path) -> list[str]:
    from runtime.ops.loader import load_app

    return [s.stage_id for s in load_app(app_ref).plan(config={"job.dir": str(job_dir)}).stages]


def test_the_first_answer_draws_the_plan_and_the_headline_status_gives(tmp_path: Path) -> None:
    port = free_port()
    job_dir = tmp_path / "job"
    # no commit while the test looks: the lag since the checkpoint holds still, and is not 0
    proc = cli("run", CLICKS, "--sample", "2000", "--follow", "-q", "--ui", f"127.0.0.1:{port}",
               "-c", f"job.dir={job_dir}", "-c", "task.commit.ms=600000", cwd=tmp_path)
    url = f"http://127.0.0.1:{port}/"
    stages = _stages(CLICKS, job_dir)
    try:
        wait_for("every click processed", lambda: (s := get_json(url + "api/state"))
                 ["plan_ready"] and s["operators"]["clicks-1-filter-humans"]["in"] == 2000
                 and s["streams"]["clicks"]["behind"] == 0 and s, proc=proc, timeout=90)
        with chromium() as browser:
            # the first answer alone: no events, no separate drawing
            page = browser.new_page(viewport=VIEWPORT)
            page.route("**/events", lambda route: route.abort())
            page.route("**/plan.svg", lambda route: route.abort())
            page.goto(url)
            first = drawn(page)
            assert not first["waiting"], first
            assert len(first["stages"]) == len(stages), (first["stages"], stages)
            for _ in range(5):  # until the page's snapshot and status agree on the moment
                page.goto(url)
                seen = drawn(page)
                status = status_json(CLICKS, "-c", f"job.dir={job_dir}")
                again = get_json(url + "api/state")
                if page_numbers(seen["state"]) == page_numbers(again):
                    break
            for stage, label in zip(sorted(stages), sorted(seen["stages"]), strict=True):
                assert label == f"{stage}\nruns on the local system", label
            assert "clicks-1-map-section" in seen["nodes"]
            assert seen["updates"] == 1  # drawn from the first answer
            state = seen["state"]
            head = state["headline"]
            assert seen["shown"] == seen["expected"], seen
            # the headline and each partition, as status gives them
            numbers = status_numbers(status, set(page_numbers(state)))
            assert page_numbers(state) == numbers and len(numbers) == 4, (state, status)
            assert head["lag"] == sum(lag for lag, _ in numbers.values()) > 0
            assert head["end"] == sum(end for _, end in numbers.values()) == 2000
            assert head["behind"] == 0 and seen["shown"]["behind"] == "0"
            assert seen["cells"] == {"clicks": 4}
            page.close()
            # and live: the events come, and the page keeps drawing
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(url)
            page.wait_for_function("() => (window.__updates || 0) >= 3", timeout=30_000)
            ok, box = inside_viewport(page, "#ops")
            assert ok, box
            screenshot(page, "local-job")
            page.close()
    finally:
        out, err = stop(proc)
    assert proc.returncode == 0, err


def test_a_page_opened_before_the_first_data_draws_it_when_it_comes(tmp_path: Path) -> None:
    from runtime.local.system import LocalJob
    from runtime.ops.loader import load_app

    port = free_port()
    job_dir = tmp_path / "job"
    url = f"http://127.0.0.1:{port}/"
    proc = cli("run", CLICKS, "--follow", "-q", "--ui", f"127.0.0.1:{port}",
               "-c", f"job.dir={job_dir}", cwd=tmp_path)
    stages = _stages(CLICKS, job_dir)
    loader: threading.Thread | None = None
    try:
        wait_for("the page", lambda: get_json(url + "api/state"), proc=proc)
        with chromium() as browser:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(url)
            before = drawn(page)
            assert before["state"] is None or before["state"]["headline"]["end"] == 0, before
            assert before["cells"] == {} or before["cells"] == {"clicks": 4}
            page.evaluate("() => { window.__same = 'this page' }")  # gone if it reloads
            sample = _clicks_sample()

            def load() -> None:
                job = LocalJob(load_app(CLICKS), {"job.dir": str(job_dir)}, run=False)
                try:
                    job.load("clicks", sample(1500, start=1_700_000_100.0))
                finally:
                    job.close()
            loader = threading.Thread(target=load, daemon=True)
            loader.start()
            page.wait_for_function(
                "() => window.__state && window.__state.headline.end === 1500"
                " && window.__state.headline.behind === 0"
                " && document.querySelectorAll('#dag svg g.cluster').length > 0",
                timeout=60_000)
            after = drawn(page)
            assert page.evaluate("() => window.__same") == "this page"
            assert len(after["stages"]) == len(stages)
            assert after["cells"] == {"clicks": 4}
            assert after["shown"] == after["expected"]
            assert after["state"]["operators"]["clicks-1-filter-humans"]["in"] == 1500
            screenshot(page, "local-job-before-data")
            page.close()
    finally:
        if loader is not None:
            loader.join(30)
        out, err = stop(proc)
    assert proc.returncode == 0, err


def test_an_input_of_64_partitions_is_one_row_and_the_operators_stay_in_view(
        tmp_path: Path) -> None:
    from runtime.ops.ui import RunnerSource, UIServer
    from runtime.runner import LocalRunner
    from tests.runtime.wide_app import app, sample_input

    runner = LocalRunner(app, {"job.dir": str(tmp_path / "job")},
                         inputs={"taps": sample_input(12_000)}, follow=True)
    runner.start()
    server = UIServer(RunnerSource(runner), lambda: runner.plan if runner.container else None,
                      "taps-1", "127.0.0.1", 0, interval=0.3)
    try:
        url = server.start()
        wait_for("64 partitions", lambda: (s := get_json(url + "api/state"))["plan_ready"]
                 and len(s["partitions"]) >= 64 and s["headline"]["end"] == 12_000 and s)
        with chromium() as browser:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(url)
            page.wait_for_function("() => (window.__updates || 0) >= 2", timeout=30_000)
            seen = drawn(page)
            assert seen["cells"] == {"taps": 64}, seen["cells"]
            assert page.evaluate("() => document.querySelectorAll('#inputs tbody tr').length") \
                == 1
            assert len(seen["stages"]) == len(runner.plan.stages)
            assert all(label.endswith("runs on the local system") for label in seen["stages"])
            for section in ("#ops", "#streams", "#inputs"):
                ok, box = inside_viewport(page, section)
                assert ok, (section, box)
            screenshot(page, "local-job-64-partitions")  # while it works through the backlog
            page.close()
    finally:
        server.stop()
        runner.stop()
        runner.close()


def test_the_headline_is_how_far_behind_the_inputs_are_and_their_rate() -> None:
    """Behind and the lag since the checkpoint sum the input partitions only (an intermediate
    stream's are its own row's); the rate is how fast the inputs' next offsets move."""
    from runtime.ops.loader import load_app
    from runtime.ops.ui import JobView

    view = JobView(load_app(CLICKS).plan(), "clicks-1")

    def part(sid: str, p: int, nxt: int, end: int, checkpointed: int) -> list[Any]:
        labels = {"task": f"Partition {p}", "stream": sid, "partition": str(p)}
        return [("task", "next-offset", labels, nxt), ("task", "end-offset", labels, end),
                ("task", "behind", labels, end - nxt), ("task", "lag", labels, end - checkpointed)]

    t0 = 1_800_000_000_000
    mid = "clicks-1-partition_by-by-page"
    view.add([("c0", t0, part("clicks", 0, 100, 500, 50) + part("clicks", 1, 0, 300, 0)
               + part(mid, 0, 10, 90, 0))])
    view.add([("c0", t0 + 1000, part("clicks", 0, 250, 520, 50) + part("clicks", 1, 50, 300, 0)
               + part(mid, 0, 90, 90, 0))])
    state = view.state(now=(t0 + 1000) / 1000)
    assert state["headline"] == {**state["headline"], "behind": 270 + 250, "lag": 470 + 300,
                                 "end": 820, "rate": 200.0}
    assert state["streams"][mid] == {**state["streams"][mid], "kind": "intermediate",
                                     "behind": 0, "lag": 90, "rate": 80.0}
    assert [h[1:] for h in state["headline"]["history"]] == [[700, 750], [520, 770]]
    assert [h[1:] for h in state["streams"]["clicks"]["history"]] == [[700, 750], [520, 770]]
