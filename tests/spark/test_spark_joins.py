"""Stream-stream joins on Spark: a processing-time join (``ttl=``) is refused before anything
runs, since a reprocessing has no processing time to keep its entries for; the event-time join
(``within=``) gives the streaming answer."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runtime.spark import SparkRunner
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import PlanError
from samza_dsl.serdes import JsonSerde
from samza_dsl.systems import MemorySystem
from tests import rides

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
    assert lines[0].startswith("samza-dsl reprocess: error: Spark cannot run "
                               "join 'accepted'"), lines[0]
    assert "within=timedelta(...)" in lines[0] and "Traceback" not in proc.stderr


def test_the_newcomers_case_gives_every_pair_within_60_s_on_spark(spark: Any) -> None:
    """Requests joined with acceptances within 60 s over disordered input (``tests/rides.py``):
    the plain-Python answer, as every streaming runner gives it."""
    given = rides.inputs()
    result = SparkRunner(spark).reprocess(rides.build(MemorySystem()), given)
    assert rides.outputs(result.messages("accepted")) == rides.expected(given)
    assert not any(result.late_counts.values())


def test_the_join_expires_its_state_as_the_watermark_passes_on_spark(spark: Any) -> None:
    """A left join on Spark emits a left message that met nothing as soon as the watermark
    (the latest event time less the bound) passes its time + within, not at the end of the
    pass: here before the pair that comes 200 s later."""
    mem = MemorySystem()
    app = StreamApplication("expiry")

    def read(sid: str) -> Any:
        return app.input(mem.input(sid, serde=rides.SERDE, partitions=1,
                                   event_time=rides.event_time,
                                   max_out_of_orderness=timedelta(seconds=5)))
    (read("requests")
     .join(read("acceptances"), key=lambda kv: kv.key, other_key=lambda kv: kv.key,
           combine=lambda r, a: [r.value["id"], a.value["id"] if a is not None else None],
           within=timedelta(seconds=60), how="left", name="j")
     .send_to(app.output(mem.output("out", serde=JsonSerde(), partitions=1))))
    requests = {0: [KV("ann", {"id": "q0", "t": 0}), KV("bob", {"id": "q1", "t": 200_000})]}
    acceptances = {0: [KV("bob", {"id": "a1", "t": 201_000})]}
    result = SparkRunner(spark).reprocess(app, {"requests": requests,
                                                "acceptances": acceptances})
    assert result.messages("out") == [["q0", None], ["q1", "a1"]]
