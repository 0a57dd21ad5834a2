"""Stream-stream joins on Spark: a processing-time join (``ttl=``) is refused before anything
runs, since a reprocessing has no processing time to keep its entries for; the event-time join
(``within=``) gives the streaming answer."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from runtime.spark import SparkRunner
from samza_dsl import StreamApplication
from samza_dsl.errors import PlanError
from samza_dsl.systems import MemorySystem

CLI = Path(sys.executable).parent / "samza-dsl"

TTL_APP = '''
from datetime import timedelta

from samza_dsl import StreamApplication
from samza_dsl.systems import MemorySystem

mem = MemorySystem()
app = StreamApplication("rides")
requests = app.input(mem.input("requests", event_time=lambda m: m["t"]))
accepts = app.input(mem.input("accepts", event_time=lambda m: m["t"]))
requests.join(accepts, key=lambda m: m["ride"], other_key=lambda m: m["ride"],
              combine=lambda r, a: [r, a], ttl=timedelta(seconds=60),
              name="accepted").send_to(app.output(mem.output("out")))
'''


def ttl_app() -> StreamApplication:
    mem = MemorySystem()
    app = StreamApplication("rides")
    requests = app.input(mem.input("requests"))
    accepts = app.input(mem.input("accepts"))
    requests.join(accepts, key=lambda m: m["ride"], other_key=lambda m: m["ride"],
                  combine=lambda r, a: [r, a], ttl=timedelta(seconds=60),
                  name="accepted").send_to(app.output(mem.output("out")))
    return app


def test_a_processing_time_join_is_refused_before_spark_starts() -> None:
    runner = SparkRunner(master="local[1]")
    with pytest.raises(PlanError, match=r"SparkRunner cannot run join 'accepted' "
                                        r"\(rides-1-join-accepted, at .*test_spark_joins.py:\d+\)"
                                        r".*processing time.*within=timedelta\(\.\.\.\)") as e:
        runner.reprocess(ttl_app(), {"requests": [{"ride": 1}], "accepts": [{"ride": 1}]})
    assert "\n" not in str(e.value)
    assert runner._spark is None  # refused when planning: no Spark session was started


def test_samza_dsl_reprocess_refuses_a_processing_time_join_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "rides.py").write_text(TTL_APP)
    for sid in ("requests", "accepts"):
        (tmp_path / f"{sid}.jsonl").write_text('{"ride": 1, "t": 0}\n')
    proc = subprocess.run([str(CLI), "reprocess", "rides.py:app",
                           "--input", "requests=requests.jsonl", "--input",
                           "accepts=accepts.jsonl", "--master", "local[1]"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("samza-dsl reprocess: error: samza-dsl reprocess cannot run "
                               "join 'accepted'"), lines[0]
    assert "within=timedelta(...)" in lines[0] and "Traceback" not in proc.stderr
