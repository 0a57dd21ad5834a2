"""The end-of-run summary counts a run's outputs as they are written and shows a few from the
end of each output: its memory does not grow with how much the run wrote."""

from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

from runtime import LocalRunner
from runtime.local.system import LocalJob
from runtime.summary import print_outputs
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem


def _app() -> StreamApplication:
    app = StreamApplication("many-outputs", config={"task.commit.ms": 500})
    local = LocalSystem("local")
    serde = KVSerde(StringSerde(), JsonSerde())
    events = app.input(local.input("events", serde=serde, partitions=2))
    out = app.output(local.output("out", serde=serde, partitions=2))
    events.map(lambda kv: KV(kv.key, {"i": kv.value, "pad": "x" * 40}), name="wide").send_to(out)
    return app


def _summary_peak(tmp_path: Path, n: int) -> tuple[int, str]:
    app = _app()
    config = {"job.dir": str(tmp_path / f"job-{n}")}
    job = LocalJob(app, config, run=False)
    try:
        job.load("events", (KV(f"k{i}", i) for i in range(n)))
    finally:
        job.close()
    runner = LocalRunner(app, config).run()
    try:
        text = io.StringIO()
        tracemalloc.start()
        try:
            print_outputs(runner, out=text, limit=10)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return peak, text.getvalue()
    finally:
        runner.close()


def test_the_summarys_memory_does_not_grow_with_the_outputs(tmp_path: Path) -> None:
    small, small_text = _summary_peak(tmp_path, 2_000)
    large, large_text = _summary_peak(tmp_path, 20_000)
    assert "out: 20000 message(s)" in large_text and "out: 2000 message(s)" in small_text
    assert "out: 20,000 message(s) (20,000 to out)" in large_text
    assert sum(ln.startswith("  KV(") for ln in large_text.splitlines()) == 10
    # ten times the outputs: the summary's peak stays about the same, and small
    assert large < 2 * small + 200_000, (small, large)
    assert large < 1_000_000, large
