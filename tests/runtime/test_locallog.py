"""The LMDB-backed local log: streams, appends, reads, metadata, sharing and failures."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.local import log as locallog
from runtime.local import log_env, segments
from runtime.local.log import LocalLog
from samza_dsl.errors import SamzaError

REPO = Path(locallog.__file__).resolve().parents[1]


def recs(n, start=0, prefix=b"v"):
    return [(b"k%d" % i, prefix + b"%d" % i, None) for i in range(start, start + n)]


def read_all(log, stream, partition, offset=0, chunk=7):
    out = []
    while True:
        first, got = log.read(stream, partition, offset, chunk)
        if not got:
            return out
        assert first == offset
        out.extend(got)
        offset += len(got)


@pytest.fixture
def log(tmp_path):
    with LocalLog(tmp_path / "log") as opened:
        yield opened


# ---------------------------------------------------------------------------- streams


def test_create_partitions_and_streams(log):
    assert log.streams() == {}
    assert log.partitions("orders") is None
    log.create("orders", 3)
    log.create("page-views.v2_x", 1)
    log.create("orders", 3)  # idempotent
    assert log.partitions("orders") == 3
    assert log.partitions("page-views.v2_x") == 1
    assert log.streams() == {"orders": 3, "page-views.v2_x": 1}


def test_create_with_another_count_names_the_stream_and_both_counts(log):
    log.create("orders", 3)
    with pytest.raises(SamzaError) as info:
        log.create("orders", 5)
    text = str(info.value)
    assert "'orders'" in text and "3" in text and "5" in text and log.path in text
    assert log.partitions("orders") == 3


@pytest.mark.parametrize("bad", ["", "a b", "a/b", "a\x00b", "é", "x" * 250])
def test_invalid_stream_ids_are_refused(log, bad):
    with pytest.raises(SamzaError, match="invalid stream id"):
        log.create(bad, 1)


@pytest.mark.parametrize("bad", [0, -1, 1.5, 1 << 32])
def test_invalid_partition_counts_are_refused(log, bad):
    with pytest.raises(SamzaError, match="partition count"):
        log.create("s", bad)


# ---------------------------------------------------------------------------- append / read


def test_round_trip_with_none_keys_values_and_headers(log):
    log.create("s", 1)
    batch = [
        (b"k", b"v", None),
        (None, b"only value", None),
        (b"only key", None, None),
        (None, None, None),
        (b"h", b"v", (("trace", b"\x00\x01"), ("empty", b""))),
        (b"", b"", ()),
        (bytearray(b"ba"), memoryview(b"mv"), [("list", b"ok")]),
    ]
    assert log.append("s", 0, batch, timestamp_ms=123) == 0
    first, got = log.read("s", 0, 0, 100)
    assert first == 0
    assert got == [
        (b"k", b"v", None),
        (None, b"only value", None),
        (b"only key", None, None),
        (None, None, None),
        (b"h", b"v", (("trace", b"\x00\x01"), ("empty", b""))),
        (b"", b"", ()),
        (b"ba", b"mv", (("list", b"ok"),)),
    ]
    for key, value, headers in got:
        assert key is None or type(key) is bytes
        assert value is None or type(value) is bytes
        assert headers is None or type(headers) is tuple
        for header in headers or ():
            assert type(header) is tuple and type(header[0]) is str and type(header[1]) is bytes


def test_append_accepts_tuples_and_iterables(log):
    log.create("s", 1)
    assert log.append("s", 0, tuple(recs(3))) == 0
    assert log.append("s", 0, iter(recs(2, 3))) == 3
    assert read_all(log, "s", 0) == recs(5)


def test_offsets_are_contiguous_across_batches_and_independent_per_partition(log):
    log.create("s", 3)
    assert log.append("s", 0, recs(5)) == 0
    assert log.append("s", 0, recs(1, 5)) == 5
    assert log.append("s", 2, recs(4)) == 0
    assert log.append("s", 0, recs(3, 6)) == 6
    assert log.append("s", 2, recs(2, 4)) == 4
    assert log.append("s", 0, []) == 9  # nothing written: the end offset
    assert [log.end_offset("s", p) for p in range(3)] == [9, 0, 6]
    assert read_all(log, "s", 0) == recs(9)
    assert read_all(log, "s", 1) == []
    assert read_all(log, "s", 2) == recs(6)


def test_streams_whose_ids_share_a_prefix_do_not_mix(log):
    for name in ["a", "a-", "a.b", "a0", "ab"]:
        log.create(name, 2)
    for i, name in enumerate(["a", "a-", "a.b", "a0", "ab"]):
        log.append(name, 1, recs(i + 1, prefix=name.encode()))
    for i, name in enumerate(["a", "a-", "a.b", "a0", "ab"]):
        assert read_all(log, name, 1) == recs(i + 1, prefix=name.encode())
        assert log.end_offset(name, 1) == i + 1
        assert log.end_offset(name, 0) == 0
        assert log.read(name, 0, 0, 10) == (0, [])


def test_read_from_the_middle_of_a_segment_across_boundaries_with_max_records(log):
    log.create("s", 1)
    for start in (0, 10, 20):
        log.append("s", 0, recs(10, start))
    all_records = recs(30)
    assert log.read("s", 0, 3, 4) == (3, all_records[3:7])  # inside the first segment
    assert log.read("s", 0, 7, 6) == (7, all_records[7:13])  # spans a boundary
    assert log.read("s", 0, 5, 100) == (5, all_records[5:])  # spans all three, to the end
    assert log.read("s", 0, 10, 10) == (10, all_records[10:20])  # exactly one segment
    assert log.read("s", 0, 0, 30) == (0, all_records)
    assert log.read("s", 0, 29, 5) == (29, all_records[29:])  # the last record
    assert log.read("s", 0, 12, 0) == (12, [])
    for offset in range(31):
        for max_records in (1, 3, 10, 11, 40):
            assert log.read("s", 0, offset, max_records) == (
                offset,
                all_records[offset : offset + max_records],
            )


def test_read_at_or_past_the_end_and_end_offset_of_an_empty_partition(log):
    log.create("s", 2)
    assert log.end_offset("s", 0) == 0
    assert log.read("s", 0, 0, 10) == (0, [])
    assert log.read("s", 0, 5, 10) == (5, [])
    log.append("s", 0, recs(4))
    assert log.read("s", 0, 4, 10) == (4, [])
    assert log.read("s", 0, 1000, 10) == (1000, [])
    assert log.end_offset("s", 1) == 0  # the neighbour's records are not ours
    assert log.read("s", 1, 0, 10) == (0, [])


def test_invalid_read_arguments(log):
    log.create("s", 1)
    with pytest.raises(SamzaError, match="offset -1"):
        log.read("s", 0, -1, 10)
    with pytest.raises(SamzaError, match="max_records"):
        log.read("s", 0, 0, -1)


def test_unknown_streams_and_partitions_are_errors_naming_them(log):
    log.create("s", 2)
    for call in (
        lambda: log.append("nope", 0, recs(1)),
        lambda: log.read("nope", 0, 0, 1),
        lambda: log.end_offset("nope", 0),
    ):
        with pytest.raises(SamzaError, match="unknown stream 'nope'") as info:
            call()
        assert log.path in str(info.value)
    for partition in (2, -1, 7):
        for call in (
            lambda p=partition: log.append("s", p, recs(1)),
            lambda p=partition: log.read("s", p, 0, 1),
            lambda p=partition: log.end_offset("s", p),
        ):
            with pytest.raises(SamzaError, match=rf"partition {partition} .*'s'.* 2 partitions"):
                call()
    assert log.end_offset("s", 0) == log.end_offset("s", 1) == 0


def test_malformed_records_are_refused(log):
    log.create("s", 1)
    for bad in (
        [(b"k", "a str", None)],
        [(b"k", b"v")],
        [b"kv"],
        [(1, b"v", None)],
        [(b"k", b"v", {"h": b"1"})],
        [(b"k", b"v", (("h", "str"),))],
        recs(3) + [(b"k", 5, None)],
    ):
        with pytest.raises(SamzaError, match="'s' partition 0") as info:
            log.append("s", 0, bad)
        assert "(key, value, headers)" in str(info.value)
    assert log.end_offset("s", 0) == 0


def test_a_malformed_record_inside_a_batch_fails_on_read_naming_the_segment(log):
    log.create("s", 1)
    log.append("s", 0, recs(3))
    log.append("s", 0, recs(1, 3) + [(b"k", 42, None)] + recs(1, 5))  # only ends are checked
    assert log.read("s", 0, 0, 3) == (0, recs(3))
    with pytest.raises(SamzaError, match="offset 3 of stream 's' partition 0") as info:
        log.read("s", 0, 2, 10)
    assert "delete the stream" in str(info.value).lower()
    assert log.end_offset("s", 0) == 6
    assert log.read("s", 0, 6, 10) == (6, [])  # polling at the end does not decode the last segment


@pytest.mark.parametrize("timestamp", [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32,
                                       1_700_000_000_000, 2**63 - 1, 2**64 - 1, -1, -32, -33,
                                       -128, -129, -32768, -32769, -(2**31), -(2**31) - 1,
                                       -(2**63)])
@pytest.mark.parametrize("count", [1, 15, 16, 65535, 65536])
def test_segment_count_is_read_from_headers_for_every_int_encoding(timestamp, count):
    encoded = msgspec.msgpack.encode((timestamp, [(None, None, None)] * count))
    assert segments.segment_count(encoded) == count
    assert segments.segment_count(memoryview(encoded)) == count


def test_timestamps_of_any_int_encoding_round_trip_through_append(log):
    log.create("s", 1)
    for ts in (0, 5, -5, 300, -300, 70000, 2**40, -(2**40), 2**63 - 1):
        log.append("s", 0, recs(2), timestamp_ms=ts)
    assert log.end_offset("s", 0) == 18
    assert len(read_all(log, "s", 0)) == 18


def test_append_many_writes_every_partition_in_one_transaction(log):
    log.create("a", 2)
    log.create("b", 1)
    log.append("a", 1, recs(3))
    firsts = log.append_many({("a", 0): recs(2), ("a", 1): recs(4, 3), ("b", 0): recs(1)})
    assert firsts == {("a", 0): 0, ("a", 1): 3, ("b", 0): 0}
    firsts = log.append_many({("a", 0): recs(1, 2), ("b", 0): []})
    assert firsts == {("a", 0): 2, ("b", 0): 1}
    assert read_all(log, "a", 0) == recs(3)
    assert read_all(log, "a", 1) == recs(7)
    assert read_all(log, "b", 0) == recs(1)


def test_append_many_is_atomic(log):
    log.create("a", 2)
    with pytest.raises(SamzaError, match="partition 5"):
        log.append_many({("a", 0): recs(2), ("a", 1): recs(2), ("a", 5): recs(1)})
    assert log.end_offset("a", 0) == log.end_offset("a", 1) == 0


def test_delete_stream(log):
    log.create("s", 2)
    log.create("s2", 1)
    log.create("t", 1)
    log.append("s", 0, recs(3))
    log.append("s", 1, recs(2))
    log.append("s2", 0, recs(4))
    log.append("t", 0, recs(1))
    log.delete_stream("s")
    assert log.partitions("s") is None
    assert log.streams() == {"s2": 1, "t": 1}
    with pytest.raises(SamzaError, match="unknown stream 's'"):
        log.read("s", 0, 0, 10)
    log.delete_stream("s")  # a no-op now
    log.delete_stream("never-was")
    log.create("s", 4)  # a new stream with another count starts empty
    assert [log.end_offset("s", p) for p in range(4)] == [0, 0, 0, 0]
    assert read_all(log, "s", 0) == []
    assert read_all(log, "s2", 0) == recs(4)
    assert read_all(log, "t", 0) == recs(1)
    log.delete_stream("t")  # not the first stream in the log: its segments go too
    log.create("t", 1)
    assert log.end_offset("t", 0) == 0
    assert read_all(log, "s2", 0) == recs(4)


# ---------------------------------------------------------------------------- metadata


def test_metadata_put_get_items_delete(log):
    assert log.get_meta("x") is None
    assert log.meta_items() == {}
    log.put_meta("ckpt/job/0", b"a")
    log.put_meta_many({"ckpt/job/1": b"b", "ckpt/other/0": b"c", "zzz": b""})
    log.put_meta("ckpt/job/0", b"a2")
    assert log.get_meta("ckpt/job/0") == b"a2"
    assert log.get_meta("zzz") == b""
    assert log.meta_items("ckpt/job/") == {"ckpt/job/0": b"a2", "ckpt/job/1": b"b"}
    assert log.meta_items() == {
        "ckpt/job/0": b"a2", "ckpt/job/1": b"b", "ckpt/other/0": b"c", "zzz": b"",
    }
    assert log.meta_items("nothing") == {}
    assert log.delete_meta("ckpt/job/") == 2
    assert log.delete_meta("ckpt/job/") == 0
    assert log.meta_items() == {"ckpt/other/0": b"c", "zzz": b""}
    assert log.delete_meta("zz") == 1  # not the first key
    assert log.meta_items() == {"ckpt/other/0": b"c"}
    log.put_meta("zzz", b"")
    assert log.delete_meta("") == 2
    assert log.meta_items() == {}
    with pytest.raises(SamzaError, match="metadata key"):
        log.put_meta("", b"x")
    with pytest.raises(SamzaError, match="metadata key"):
        log.put_meta("k" * 600, b"x")


def test_metadata_and_streams_are_separate(log):
    log.put_meta("s", b"x")
    log.create("s", 1)
    assert log.get_meta("s") == b"x"
    assert log.streams() == {"s": 1}


# ---------------------------------------------------------------------------- lifecycle


def test_persistence_across_close_and_reopen(tmp_path):
    path = tmp_path / "log"
    with LocalLog(path) as log:
        log.create("s", 2)
        log.append("s", 1, recs(5))
        log.put_meta("m", b"1")
        log.sync()
    assert not log_env._REGISTRY.get(os.path.realpath(path))
    with LocalLog(str(path)) as log:
        assert log.streams() == {"s": 2}
        assert log.end_offset("s", 1) == 5
        assert read_all(log, "s", 1) == recs(5)
        assert log.get_meta("m") == b"1"
        assert log.append("s", 1, recs(1, 5)) == 5


def test_the_directory_is_created_with_parents(tmp_path):
    with LocalLog(tmp_path / "a" / "b" / "c") as log:
        log.create("s", 1)
    assert (tmp_path / "a" / "b" / "c" / "data.mdb").exists()


def test_two_logs_on_one_path_share_the_environment(tmp_path):
    path = tmp_path / "log"
    one = LocalLog(path)
    two = LocalLog(str(path) + "/")
    assert one._shared is two._shared
    assert one._shared.refs == 2
    one.create("s", 1)
    one.append("s", 0, recs(2))
    assert two.read("s", 0, 0, 10) == (0, recs(2))
    one.close()
    one.close()  # closing twice is harmless
    with pytest.raises(SamzaError, match="closed"):
        one.read("s", 0, 0, 10)
    assert two.append("s", 0, recs(1, 2)) == 2  # still open
    two.close()
    assert os.path.realpath(path) not in log_env._REGISTRY
    with LocalLog(path) as three:
        assert read_all(three, "s", 0) == recs(3)


def test_a_directory_recreated_while_open_is_a_new_log(tmp_path):
    path = tmp_path / "log"
    old = LocalLog(path)
    old.create("s", 1)
    old.append("s", 0, recs(2))
    shutil.rmtree(path)
    with LocalLog(path) as new:
        assert new._shared is not old._shared
        assert new.streams() == {}
    old.close()


def test_another_process_appends_while_this_one_reads(tmp_path):
    path = tmp_path / "log"
    log = LocalLog(path)
    log.create("s", 2)
    log.append("s", 0, recs(1))
    script = textwrap.dedent(f"""
        import time
        from runtime.local.log import LocalLog
        with LocalLog({str(path)!r}) as log:
            for i in range(20):
                log.append("s", 0, [(b"k%d" % (1 + 3 * i + j), b"v%d" % (1 + 3 * i + j), None)
                                    for j in range(3)])
                time.sleep(0.005)
            log.append("s", 1, [(b"done", None, None)])
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env,
                             stderr=subprocess.PIPE)
    seen, offset, deadline = [], 0, time.monotonic() + 15
    while len(seen) < 61 and time.monotonic() < deadline:
        first, got = log.read("s", 0, offset, 4)
        assert first == offset
        seen.extend(got)
        offset += len(got)
        if not got:
            time.sleep(0.002)
    _, err = child.communicate(timeout=15)
    assert child.returncode == 0, err.decode()
    assert seen == recs(61)
    assert log.end_offset("s", 0) == 61
    assert log.read("s", 1, 0, 10) == (0, [(b"done", None, None)])
    log.close()


def test_a_forked_child_opens_its_own_environment(tmp_path):
    path = tmp_path / "log"
    log = LocalLog(path)
    log.create("s", 1)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        status = b"?"
        try:
            try:
                log.read("s", 0, 0, 1)
                status = b"old handle worked"
            except SamzaError:
                with LocalLog(path) as mine:
                    mine.append("s", 0, recs(2))
                status = b"ok"
        except BaseException as e:
            status = repr(e).encode()
        finally:
            os.write(write_fd, status)
            os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    with os.fdopen(read_fd, "rb") as pipe:
        assert pipe.read() == b"ok"
    assert read_all(log, "s", 0) == recs(2)
    log.close()


@pytest.mark.parametrize("size", [10, 8192, 100_000])
def test_a_corrupt_file_is_an_error_naming_the_path(tmp_path, size):
    path = tmp_path / "log"
    with LocalLog(path) as log:
        log.create("s", 1)
        log.append("s", 0, recs(10))
    (path / "data.mdb").write_bytes(os.urandom(size))
    with pytest.raises(SamzaError) as info:
        LocalLog(path)
    text = str(info.value)
    # shorter than an LMDB file's first page, it can only be a cut copy
    assert str(path) in text and ("is truncated" if size < 4096 else "delete") in text
    assert os.path.realpath(path) not in log_env._REGISTRY


def test_a_path_that_is_a_file_is_an_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(SamzaError, match="file"):
        LocalLog(tmp_path / "file")


def test_a_full_map_is_an_error_naming_the_path_and_map_size(tmp_path):
    path = tmp_path / "log"
    with LocalLog(path, map_size=1 << 20) as log:
        log.create("s", 1)
        with pytest.raises(SamzaError, match="map_size=1048576") as info:
            for _ in range(20):
                log.append("s", 0, [(b"k", os.urandom(100_000), None)])
        assert str(path) in str(info.value)
        end = log.end_offset("s", 0)
        assert len(read_all(log, "s", 0)) == end  # what was committed is intact
        log.put_meta("still", b"writable")
        log.delete_stream("s")


# ---------------------------------------------------------------------------- properties

headers = st.none() | st.lists(
    st.tuples(st.text(max_size=4), st.binary(max_size=4)), max_size=2
).map(tuple)
records = st.tuples(st.none() | st.binary(max_size=6), st.none() | st.binary(max_size=6), headers)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    partitions=st.integers(1, 3),
    batches=st.lists(
        st.tuples(st.integers(0, 2), st.lists(records, max_size=12), st.booleans()), max_size=12
    ),
    reads=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 60), st.integers(0, 25)),
                   max_size=15),
)
def test_random_batches_read_back_as_their_concatenation(partitions, batches, reads):
    with tempfile.TemporaryDirectory() as tmp, LocalLog(tmp) as log:
        log.create("s", partitions)
        model: dict[int, list] = {p: [] for p in range(partitions)}
        pending: dict[int, list] = {}
        for partition, batch, together in batches:
            partition %= partitions
            if together:  # gather into one append_many
                pending.setdefault(partition, []).extend(batch)
                continue
            if pending:
                firsts = log.append_many({("s", p): b for p, b in pending.items()})
                for p, b in pending.items():
                    assert firsts[("s", p)] == len(model[p])
                    model[p].extend(b)
                pending = {}
            assert log.append("s", partition, batch) == len(model[partition])
            model[partition].extend(batch)
        if pending:
            log.append_many({("s", p): b for p, b in pending.items()})
            for p, b in pending.items():
                model[p].extend(b)
        for p in range(partitions):
            assert log.end_offset("s", p) == len(model[p])
            assert read_all(log, "s", p, chunk=5) == model[p]
        for partition, offset, max_records in reads:
            partition %= partitions
            assert log.read("s", partition, offset, max_records) == (
                offset, model[partition][offset : offset + max_records]
            )


def _drop_first_segment(log, stream, partition):
    """What a future retention would do: remove a partition's oldest segment."""
    shared = log._shared
    prefix = stream.encode() + b"\x00" + partition.to_bytes(4, "big")
    with shared.env.begin(write=True) as txn:
        assert txn.delete(prefix + (0).to_bytes(8, "big"), db=shared.log)


@pytest.mark.parametrize("partition", [0, 1])  # 0: the first keys of the log; 1: after another's
def test_reading_before_the_earliest_segment_starts_at_the_earliest(log, partition):
    log.create("s", 2)
    for start in (0, 10, 20):
        log.append("s", 0, recs(10, start))
        log.append("s", 1, recs(10, start))
    _drop_first_segment(log, "s", partition)
    assert log.read("s", partition, 0, 5) == (10, recs(5, 10))
    assert log.read("s", partition, 3, 100) == (10, recs(20, 10))
    assert log.read("s", partition, 15, 3) == (15, recs(3, 15))
    assert log.end_offset("s", partition) == 30
    other = 1 - partition
    assert log.read("s", other, 0, 100) == (0, recs(30))


def test_whole_segments_returns_the_last_batch_whole(tmp_path):
    log = LocalLog(tmp_path / "log")
    try:
        log.create("s", 1)
        for b in range(3):
            log.append("s", 0, [(None, bytes([b, i]), None) for i in range(10)])
        first, recs = log.read("s", 0, 5, 3, whole_segments=True)
        assert first == 5 and [r[1] for r in recs] == [bytes([0, i]) for i in range(5, 10)]
        first, recs = log.read("s", 0, 10, 12, whole_segments=True)
        assert first == 10 and len(recs) == 20
        first, recs = log.read("s", 0, 5, 3)
        assert len(recs) == 3
    finally:
        log.close()


@given(sizes=st.one_of(st.lists(st.integers(0, 150), min_size=1, max_size=400),
                      st.lists(st.integers(0, 5_000), min_size=1, max_size=40)),
       keyed=st.booleans())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_batch_larger_than_a_page_is_stored_as_segments_of_one_page(
        tmp_path_factory, sizes, keyed):
    """Each stored segment fits one of LMDB's pages (but for a record larger than that alone,
    and records over an eighth of a page, whose segments take eight), so any page the log frees fits
    any segment; the batch keeps its offsets, in order, and ``append`` gives its first."""
    log = LocalLog(tmp_path_factory.mktemp("log") / "log")
    try:
        log.create("s", 2)
        log.append("s", 1, [(None, b"x", None)] * 3)
        recs = [(b"k%d" % i if keyed else None, bytes([i % 256]) * n, None)
                for i, n in enumerate(sizes)]
        assert log.append("s", 1, recs) == 3
        assert log.read("s", 1, 3, 1_000) == (3, recs)
        assert log.end_offset("s", 1) == 3 + len(recs)
        key = len(b"s") + 13  # a segment's key: the stream, 0x00, the partition, the offset
        segs = [(first, span, size - key) for first, span, _, size in log.segments("s", 1)]
        assert sum(span for _, span, _ in segs) == 3 + len(recs)
        # a page each; eight for records over an eighth of a page (so they fill the pages they take)
        limit = segments.SEGMENT_BYTES if max(sizes) < 400 else segments.LARGE_SEGMENT_BYTES
        for _, span, size in segs:
            assert size <= limit or span == 1, segs
        total = sum(size for *_, size in segs[1:])
        if max(sizes) < 200 and total > 2 * segments.SEGMENT_BYTES:  # few segments, and full
            assert len(segs) - 1 <= 2 * total // segments.SEGMENT_BYTES + 1, segs
    finally:
        log.close()


@pytest.mark.parametrize("size", [1_500, 2_100, 3_000, 5_000])
def test_records_of_a_few_kilobytes_fill_the_pages_they_take(tmp_path, size):
    """A record of 2 to 4 KB alone on a page would leave up to half of it empty: records over
    an eighth of a page share segments of up to eight pages, so the log's file holds about
    their own size."""
    log = LocalLog(tmp_path / "log")
    try:
        log.create("s", 1)
        for _ in range(4):
            log.append("s", 0, [(None, b"x" * size, None)] * 100)
        segs = log.segments("s", 0)
        pages = sum(-(-(stored + 16) // 4096) for *_, stored in segs)
        assert pages * 4096 < 1.15 * 400 * size, (pages, segs[:3])
        assert all(stored <= segments.LARGE_SEGMENT_BYTES or span == 1
                   for _, span, _, stored in segs)
        assert log.read("s", 0, 0, 1_000)[1] == [(None, b"x" * size, None)] * 400
    finally:
        log.close()


def _rss_file_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssFile:"):
                return int(line.split()[1])
    raise AssertionError("no RssFile in /proc/self/status")


def test_reading_a_log_end_to_end_does_not_keep_its_pages_resident(tmp_path: Path) -> None:
    """A log read once from end to end: the pages its reads mapped in are let go of every few
    tens of MB read, and every record still reads back as it was written."""
    value = os.urandom(900)
    with LocalLog(tmp_path / "log") as log:
        log.create("s", 1)
        for start in range(0, 160_000, 4_000):  # about 90 MB of segments
            log.append("s", 0, [(b"k%d" % i, value[: 100 + i % 800], None)
                                for i in range(start, start + 4_000)])
    with LocalLog(tmp_path / "log") as log:
        before = _rss_file_kb()
        grew = 0
        offset, seen = 0, 0
        while True:
            first, got = log.read("s", 0, offset, 10_000, whole_segments=True)
            if not got:
                break
            for i, (k, v, _h) in enumerate(got, start=first):
                assert k == b"k%d" % i and v == value[: 100 + i % 800]
            seen += len(got)
            offset = first + len(got)
            grew = max(grew, _rss_file_kb() - before)
        assert seen == 160_000
        # about 90 MB of the file read: without letting go, all of it stays mapped
        assert grew < 60 * 1024, f"the log's mapped pages grew by {grew} kB"
        assert log._shared is not None and log._shared.pages.release() > 0


def test_the_map_is_looked_up_once_per_environment_and_again_when_it_may_have_moved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Letting go of a log's pages reads /proc/self/maps once for its environment; after a
    resize, and for a new environment on the same file, it looks again, and still lets go of
    pages (an address kept from an old map would give madvise memory that is not the map's)."""
    import lmdb

    from runtime.host import storage

    looked = []
    real_maps_of = storage._maps_of

    def maps_of(path: str) -> list[tuple[int, int]]:
        looked.append(path)
        return real_maps_of(path)

    monkeypatch.setattr(storage, "_maps_of", maps_of)
    with LocalLog(tmp_path / "log") as log:
        log.create("s", 1)
        log.append("s", 0, recs(20_000))
        shared = log._shared
        assert shared is not None
        assert read_all(log, "s", 0, chunk=5_000) == recs(20_000)
        assert [shared.pages.release() > 0 for _ in range(3)] == [True] * 3
        assert len(looked) == 1
        (start, end), = shared.pages._ranges()
        assert end - start == shared.env.info()["map_size"]
        # resized (as another process growing the log makes it): the map may lie elsewhere
        shared.env.set_mapsize(shared.env.info()["map_size"] * 2)
        assert read_all(log, "s", 0, chunk=5_000) == recs(20_000)
        assert shared.pages.release() > 0
        assert len(looked) == 2
        (start2, end2), = shared.pages._ranges()
        assert end2 - start2 == shared.env.info()["map_size"]
        assert read_all(log, "s", 0, chunk=5_000) == recs(20_000)
    assert shared.pages.release() == 0  # closed: no map, nothing asked of the kernel
    assert len(looked) == 2
    with LocalLog(tmp_path / "log") as log:  # a new environment: looked for again
        assert read_all(log, "s", 0, chunk=5_000) == recs(20_000)
        assert log._shared is not None and log._shared.pages.release() > 0
        assert len(looked) == 3
    env = lmdb.open(str(tmp_path / "log"), max_dbs=4, map_size=1 << 30)
    try:  # a MappedPages bound to no environment looks every time, as before
        loose = storage.MappedPages(str(tmp_path / "log" / "data.mdb"))
        with env.begin() as txn:
            assert txn.cursor(env.open_db(b"log", txn=txn)).first()
        assert loose.release() > 0 and loose.release() > 0
        assert len(looked) == 5
    finally:
        env.close()


def test_letting_go_of_mapped_pages_loses_nothing_a_live_reader_holds(tmp_path: Path) -> None:
    from runtime.host.storage import MappedPages

    with LocalLog(tmp_path / "log") as log:
        log.create("s", 1)
        log.append("s", 0, recs(5_000))
        shared = log._shared
        assert shared is not None
        with shared.env.begin(buffers=True) as txn:
            cur = txn.cursor(shared.log)
            assert cur.first()
            held = cur.value()  # a view into the map
            copy = bytes(held)
            assert MappedPages(os.path.join(log.path, "data.mdb")).release() > 0
            assert bytes(held) == copy
        assert read_all(log, "s", 0) == recs(5_000)
    assert MappedPages(str(tmp_path / "none" / "data.mdb")).release() == 0
