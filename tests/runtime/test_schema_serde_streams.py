"""Avro and Protobuf values end to end: a pipeline on TestRunner, and on the embedded local
system reading records a Confluent-framing producer wrote and writing Avro that fastavro reads
back; bytes that do not decode follow the stream's serde error policy (fail names the stream,
partition and offset; dead-letter keeps the raw record)."""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import fastavro
import pytest
from google.protobuf.source_context_pb2 import SourceContext

from runtime import LocalRunner
from runtime.engine.codec import ERROR_HEADER, SOURCE_HEADER
from runtime.local.system import LocalJob, dead_letter_stream
from samza_dsl import KV, StreamApplication
from samza_dsl.errors import SerdeError
from samza_dsl.serdes import AvroSerde, KVSerde, ProtobufSerde, StringSerde
from samza_dsl.systems import LocalSystem
from samza_dsl.testing import TestRunner

VIEW = {"type": "record", "name": "PageView", "namespace": "shop", "fields": [
    {"name": "user", "type": "string"}, {"name": "page", "type": "string"},
    {"name": "ms", "type": "long"}]}
VISIT = {"type": "record", "name": "Visit", "namespace": "shop", "fields": [
    {"name": "page", "type": "string"}, {"name": "seconds", "type": "double"}]}
VIEW_ID, VISIT_ID = 11, 12

VIEWS = [KV("ann", {"user": "ann", "page": "/home", "ms": 1500}),
         KV("bob", {"user": "bob", "page": "/health", "ms": 10}),
         KV("cat", {"user": "cat", "page": "/feed", "ms": 250})]


def _app(name: str) -> tuple[StreamApplication, Any, Any]:
    app = StreamApplication(name)
    local = LocalSystem("local")
    views = local.input("views", partitions=1, serde=KVSerde(
        StringSerde(), AvroSerde(VIEW, wire_format="confluent", schema_id=VIEW_ID)))
    visits = local.output("visits", partitions=1, serde=KVSerde(
        StringSerde(), AvroSerde(VISIT, wire_format="confluent", schema_id=VISIT_ID)))
    (app.input(views)
        .filter(lambda kv: kv.value["page"] != "/health", name="humans")
        .map(lambda kv: KV(kv.key, {"page": kv.value["page"], "seconds": kv.value["ms"] / 1000}),
             name="to-visit")
        .send_to(app.output(visits)))
    return app, views, visits


def _framed(schema_id: int, schema: Any, record: Any) -> bytes:
    """What a Confluent-framing producer writes: fastavro's bytes behind the header."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return b"\x00" + struct.pack(">I", schema_id) + buf.getvalue()


def _load(app: StreamApplication, config: dict[str, Any], garbage: bytes | None) -> None:
    records = [(kv.key.encode(), _framed(VIEW_ID, VIEW, kv.value), None) for kv in VIEWS]
    if garbage is not None:
        records.insert(1, (b"eve", garbage, None))
    job = LocalJob(app, config, run=False)
    try:
        job.log_of("local").append("views", 0, records)
    finally:
        job.close()


def test_avro_values_through_the_test_runner():
    app, views, visits = _app("avro-mem")
    result = TestRunner(app).add_input(views, VIEWS).run()
    assert sorted(result.messages(visits), key=lambda kv: kv.key) == [
        KV("ann", {"page": "/home", "seconds": 1.5}), KV("cat", {"page": "/feed", "seconds": 0.25})]
    assert "AvroSerde('shop.PageView', wire_format='confluent', schema_id=11)" in \
        app.plan().explain()


def test_avro_values_on_the_local_system_read_and_written_in_the_confluent_format(
        tmp_path: Path) -> None:
    app, _, _ = _app("avro-local")
    config = {"job.dir": str(tmp_path / "job")}
    _load(app, config, None)
    runner = LocalRunner(app, config).run()
    try:
        assert sorted(runner.messages("visits"), key=lambda kv: kv.key) == [
            KV("ann", {"page": "/home", "seconds": 1.5}),
            KV("cat", {"page": "/feed", "seconds": 0.25})]
        _, records = runner.job.log_of("local").read("visits", 0, 0, 10)
        visit = fastavro.parse_schema(VISIT)
        for _key, value, _ in records:  # what a Confluent-framing consumer reads
            assert value[:5] == b"\x00" + struct.pack(">I", VISIT_ID)
            fastavro.schemaless_reader(io.BytesIO(value[5:]), visit, None)
        assert [r[1] for r in records] == [_framed(VISIT_ID, VISIT, v.value) for v in
                                           runner.messages("visits")]
    finally:
        runner.close()


def test_bytes_of_another_schema_id_stop_the_job_naming_where(tmp_path: Path) -> None:
    app, _, _ = _app("avro-fail")
    config = {"job.dir": str(tmp_path / "job")}
    _load(app, config, _framed(99, VIEW, {"user": "eve", "page": "/", "ms": 1}))
    runner = LocalRunner(app, config)
    with pytest.raises(SerdeError) as err:
        runner.run()
    runner.close()
    text = str(err.value)
    assert "schema id 99, not this serde's schema id 11" in text
    assert "'views'" in text and "partition 0" in text and "offset 1" in text
    assert "samza.serde.error" in text


def test_garbage_goes_to_the_dead_letters_and_the_rest_is_processed(tmp_path: Path) -> None:
    app, _, _ = _app("avro-dlq")
    config = {"job.dir": str(tmp_path / "job"), "streams.views.samza.serde.error": "dead-letter"}
    _load(app, config, b"{not avro}")
    runner = LocalRunner(app, config).run()
    try:
        assert sorted(kv.key for kv in runner.messages("visits")) == ["ann", "cat"]
        assert runner.metrics["views.serde-errors-skipped"] == 1
        _, dead = runner.job.log_of("local").read(dead_letter_stream("avro-dlq-1"), 0, 0, 10)
        assert len(dead) == 1
        key, value, headers = dead[0]
        assert (key, value) == (b"eve", b"{not avro}")
        hdrs = dict(headers or ())
        assert hdrs[SOURCE_HEADER] == b"views/0/1"
        assert b"not the Confluent magic byte" in hdrs[ERROR_HEADER]
    finally:
        runner.close()


def test_protobuf_values_on_the_local_system(tmp_path: Path) -> None:
    app = StreamApplication("proto-local", config={"streams.files.samza.serde.error": "skip"})
    local = LocalSystem("local")
    files = local.input("files", partitions=1, serde=ProtobufSerde(
        SourceContext, wire_format="confluent", schema_id=3))
    names = local.output("names", partitions=1, serde=ProtobufSerde(SourceContext, as_dict=True))
    (app.input(files).map(lambda m: SourceContext(file_name=m.file_name.upper()), name="upper")
        .send_to(app.output(names)))
    config = {"job.dir": str(tmp_path / "job")}
    job = LocalJob(app, config, run=False)
    try:
        job.log_of("local").append("files", 0, [
            (None, b"\x00\x00\x00\x00\x03\x00" + SourceContext(file_name="a.proto")
             .SerializeToString(), None),
            (None, b"\xff\xff", None),
            (None, b"\x00\x00\x00\x00\x03\x00\x0a\x07b.proto", None)])
    finally:
        job.close()
    runner = LocalRunner(app, config).run()
    try:
        assert runner.messages("names") == [{"file_name": "A.PROTO"}, {"file_name": "B.PROTO"}]
        assert runner.metrics["files.serde-errors-skipped"] == 1
    finally:
        runner.close()


#: a run on the embedded log, in a child process whose data segment is capped at 1 GiB: an input
#: of Avro records holding an array of null, the second of them 12 bytes claiming 2**62 nulls
#: after a block of one
_HOSTILE_RUN = r"""
import json, resource, sys
resource.setrlimit(resource.RLIMIT_DATA, (1 << 30, 1 << 30))
from runtime import LocalRunner
from runtime.host.jobdir import dead_letter_stream
from runtime.local.system import LocalJob
from samza_dsl import StreamApplication
from samza_dsl.serdes import AvroSerde, JsonSerde
from samza_dsl.systems import LocalSystem



def peak_rss_kb():
    # this process's own peak: getrusage's ru_maxrss keeps the peak of the process that forked
    # it (a test session of hundreds of MB), VmHWM starts anew at the exec
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


job_dir, policy = sys.argv[1], sys.argv[2]
serde = AvroSerde({"type": "record", "name": "Nulls", "fields": [
    {"name": "xs", "type": {"type": "array", "items": "null"}}]})
app = StreamApplication("hostile")
local = LocalSystem("local")
nulls = local.input("nulls", partitions=1, serde=serde)
counts = local.output("counts", partitions=1, serde=JsonSerde())
app.input(nulls).map(lambda r: len(r["xs"]), name="count").send_to(app.output(counts))
config = {"job.dir": job_dir, "streams.nulls.samza.serde.error": policy}
records = [(None, serde.serialize({"xs": [None] * 3}), None),
           (None, b"\x02\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01\x00", None),
           (None, serde.serialize({"xs": [None] * 5}), None)]
job = LocalJob(app, config, run=False)
try:
    job.log_of("local").append("nulls", 0, records)
finally:
    job.close()
runner = LocalRunner(app, config).run()
try:
    _, dead = runner.job.log_of("local").read(dead_letter_stream(runner.job.job_name), 0, 0, 10) \
        if policy == "dead-letter" else (None, [])
    print(json.dumps({
        "counts": runner.messages("counts"),
        "skipped": runner.metrics["nulls.serde-errors-skipped"],
        "dead": [[v.hex(), [[k, h.decode()] for k, h in hs or ()]] for _, v, hs in dead],
        "max_rss_kb": peak_rss_kb()}))
finally:
    runner.close()
"""


@pytest.mark.parametrize("policy", ["skip", "dead-letter"])
def test_a_record_that_claims_2_62_nulls_is_passed_over_in_one_line(tmp_path: Path,
                                                                    policy: str) -> None:
    import json
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", _HOSTILE_RUN, str(tmp_path / "job"), policy],
                              capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("the job did not get past the record within 300 s")
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["counts"] == [3, 5]  # the job went on to the next record
    assert out["skipped"] == 1
    lines = [line for line in done.stderr.splitlines() if "cannot decode" in line]
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert "field 'xs' (array of null): a block claims 4611686018427387904 items" in line
    assert "max_items=" in line
    assert "(at stream 'nulls', partition 0, offset 1)" in line
    assert "Traceback" not in done.stderr
    assert out["max_rss_kb"] < 300 * 1024, out  # the record cost no more than a run does
    if policy == "dead-letter":
        assert "dead-letter stream" in line
        [(value, headers)] = out["dead"]
        assert bytes.fromhex(value) == b"\x02" + b"\x80" * 9 + b"\x01\x00"
        hdrs = dict(headers)
        assert hdrs[SOURCE_HEADER] == "nulls/0/1" and "max_items=" in hdrs[ERROR_HEADER]
    else:
        assert "skipped (streams.nulls.samza.serde.error=skip)" in line


def test_a_json_value_longer_than_its_serdes_max_bytes_follows_the_policy_in_a_batch(
        caplog: pytest.LogCaptureFixture) -> None:
    from runtime.engine.codec import Skipped, StreamCodec
    from runtime.engine.job import SSP
    from samza_dsl.serdes import JsonSerde

    records = [(b"a", b"[1]", None), (b"b", b"[" + b"0," * 40 + b"0]", None),
               (None, b'{"n":2}', None), (b"c", None, None)]
    keyed = StreamCodec("views", KVSerde(StringSerde(), JsonSerde(max_bytes=64)), policy="skip")
    with caplog.at_level("WARNING"):
        out = keyed.decode_batch(SSP("views", 0), 7, records, 1)
    assert out[0] == KV("a", [1]) and out[2] == KV(None, {"n": 2}) and out[3] == KV("c", None)
    assert isinstance(out[1], Skipped) and "83 bytes long, more than the 64 bytes" in \
        out[1].reason
    [line] = [r.getMessage() for r in caplog.records]
    assert "(at stream 'views', partition 0, offset 8)" in line and "max_bytes=" in line
    plain = StreamCodec("views", JsonSerde(max_bytes=64))
    with pytest.raises(SerdeError, match="offset 8.*bytes: b'\\[0,0,"):
        plain.decode_batch(SSP("views", 0), 7, records, 1)
