"""Bit rot in the local log: a byte changed on disk in a segment (an input, an output, a
changelog) or in a checkpoint is an error naming where it is, never a wrong record or a wrong
count. Under an input's ``skip`` policy the records of the bad segment are passed over, logged
and counted. Logs written before checksums existed keep being read. Real LMDB files, changed
with the lmdb module as a failing disk would change them; jobs run by the installed CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lmdb
import msgspec
import pytest

from runtime.local.log import LocalLog
from runtime.local.segments import CorruptSegmentError
from samza_dsl.errors import SamzaError

ROOT = Path(__file__).resolve().parents[2]
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
COUNTER = f"{ROOT / 'examples' / 'readwrite_counter.py'}:app"
JOB = "readwrite-counter-1"
CHANGELOG = f"{JOB}-counts-changelog"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def one_line_error(proc: subprocess.CompletedProcess[str], command: str, *fragments: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith(f"samza-dsl {command}: error: "), proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    for fragment in fragments:
        assert fragment in proc.stderr, f"{fragment!r} not in {proc.stderr!r}"
    return proc.stderr


def change_byte(log_dir: Path, db: bytes, key_prefix: bytes, old: bytes, new: bytes
                ) -> list[bytes]:
    """In the stored values under ``key_prefix`` of ``db`` holding ``old``, its first
    occurrence becomes ``new`` (of the same length): the keys changed."""
    assert len(old) == len(new)
    env = lmdb.open(str(log_dir), max_dbs=4, subdir=True)
    try:
        handle = env.open_db(db, create=False)
        changed = []
        with env.begin(write=True, db=handle) as txn:
            for k, v in list(txn.cursor()):
                if k.startswith(key_prefix) and old in v:
                    txn.put(k, v.replace(old, new, 1))
                    changed.append(k)
        return changed
    finally:
        env.close()


def test_a_changed_byte_in_a_segment_is_an_error_naming_stream_partition_offset(
        tmp_path: Path) -> None:
    with LocalLog(tmp_path / "log") as log:
        log.create("s", 2)
        log.append("s", 1, [(b"k", b"count=1", None), (b"k", b"count=2", None)])
        log.append("s", 1, [(b"k", b"count=20", None), (b"k", b"count=21", None)])
    assert change_byte(tmp_path / "log", b"log", b"s\x00", b"count=20", b"count=12")
    with LocalLog(tmp_path / "log") as log:
        assert log.read("s", 1, 0, 2) == (0, [(b"k", b"count=1", None), (b"k", b"count=2", None)])
        for read in (lambda: log.read("s", 1, 0, 10), lambda: log.read("s", 1, 2, 10),
                     lambda: log.read_with_offsets("s", 1, 3, 10)):
            with pytest.raises(CorruptSegmentError, match="fails its checksum") as info:
                read()
            err = info.value
            assert (err.stream, err.partition, err.offset, err.span) == ("s", 1, 2, 2)
            assert "offset 2 of stream 's' partition 1 (offsets 2 to 3)" in str(err)
            assert "another copy" in str(err)
        assert log.end_offset("s", 1) == 4  # the headers still tell where the partition ends


def test_a_changed_checkpoint_is_an_error_naming_it(tmp_path: Path) -> None:
    with LocalLog(tmp_path / "log") as log:
        log.put_meta("checkpoint/job-1/Partition 0", b'{"events:0": 1000}')
    assert change_byte(tmp_path / "log", b"meta", b"checkpoint/", b"1000", b"1008")
    with LocalLog(tmp_path / "log") as log:
        for read in (lambda: log.get_meta("checkpoint/job-1/Partition 0"),
                     lambda: log.meta_items("checkpoint/")):
            with pytest.raises(SamzaError, match="fails its checksum") as info:
                read()
            assert "'checkpoint/job-1/Partition 0'" in str(info.value)
            assert "samza-dsl reset" in str(info.value)


def test_a_log_written_before_checksums_is_still_read_and_appends_to_it_are_checked(
        tmp_path: Path) -> None:
    path = tmp_path / "log"
    env = lmdb.open(str(path), max_dbs=4, subdir=True)
    enc = msgspec.msgpack.encode
    with env.begin(write=True) as txn:
        txn.put(b"old", enc({"partitions": 1}), db=env.open_db(b"streams", txn=txn))
        txn.put(b"old\x00" + (0).to_bytes(4, "big") + (0).to_bytes(8, "big"),
                enc((1_700_000_000_000, [(b"a", b"1", None), (b"b", b"2", None)])),
                db=env.open_db(b"log", txn=txn))
        txn.put(b"checkpoint/old/t", b"\x81\xa1x\x01", db=env.open_db(b"meta", txn=txn))
    env.close()
    with LocalLog(path) as log:
        assert log.read("old", 0, 0, 10) == (0, [(b"a", b"1", None), (b"b", b"2", None)])
        assert log.get_meta("checkpoint/old/t") == b"\x81\xa1x\x01"
        assert log.segments("old", 0)[0][:3] == (0, 2, 1_700_000_000_000)
        assert log.append("old", 0, [(b"c", b"value-3", None)]) == 2
    assert change_byte(path, b"log", b"old\x00", b"value-3", b"value-4")
    with LocalLog(path) as log:
        assert log.read("old", 0, 0, 2)[1][1] == (b"b", b"2", None)
        with pytest.raises(CorruptSegmentError, match="offset 2 of stream 'old'"):
            log.read("old", 0, 2, 10)


def test_a_segment_of_a_checked_stream_without_its_checksum_is_an_error(tmp_path: Path) -> None:
    with LocalLog(tmp_path / "log") as log:
        log.create("s", 1)
        log.append("s", 0, [(b"k", b"v", None)])
    env = lmdb.open(str(tmp_path / "log"), max_dbs=4, subdir=True)
    with env.begin(write=True, db=env.open_db(b"log")) as txn:
        k, v = next(iter(txn.cursor()))
        txn.put(k, v[5:])  # the checksum's 5 bytes gone: a plain old-format segment
    env.close()
    with LocalLog(tmp_path / "log") as log, pytest.raises(CorruptSegmentError):
        log.read("s", 0, 0, 10)



@pytest.mark.parametrize("which", [1, 2])
def test_a_changed_byte_in_a_segment_a_whole_read_reaches_names_it(tmp_path: Path,
                                                                   which: int) -> None:
    """A reader of whole segments (the job's consumer) that reaches a changed segment after
    good ones gets the error naming the changed one, and none of its records."""
    with LocalLog(tmp_path / "log") as log:
        log.create("s", 1)
        for n in range(3):
            log.append("s", 0, [(b"k", b"count=%d%d" % (n, i), None) for i in range(2)])
    assert change_byte(tmp_path / "log", b"log", b"s\x00", b"count=%d1" % which,
                       b"count=%d9" % which)
    with LocalLog(tmp_path / "log") as log:
        with pytest.raises(CorruptSegmentError, match="fails its checksum") as info:
            log.read("s", 0, 0, 100, whole_segments=True)
        assert (info.value.offset, info.value.span) == (2 * which, 2)
        first, good = log.read("s", 0, 0, 2, whole_segments=True)
        assert (first, good) == (0, [(b"k", b"count=00", None), (b"k", b"count=01", None)])

def test_a_changed_byte_that_also_breaks_the_decoding_is_reported_as_the_checksum(
        tmp_path: Path) -> None:
    """A segment's records are decoded before its checksum is computed: a change that makes the
    decoding fail is still a checksum failure naming its offsets, and no record of it comes out."""
    with LocalLog(tmp_path / "log") as log:
        log.create("s", 1)
        log.append("s", 0, [(b"k", b"count=1", None), (b"k", b"count=2", None)])
        log.append("s", 0, [(b"k", b"count=20", None), (b"k", b"count=21", None)])
    env = lmdb.open(str(tmp_path / "log"), max_dbs=4, subdir=True)
    with env.begin(write=True, db=env.open_db(b"log")) as txn:
        k, v = list(txn.cursor())[1]
        assert v[5] == 0x92  # (timestamp, records): made an array of 3, which cannot decode
        txn.put(k, v[:5] + b"\x93" + v[6:])
    env.close()
    with LocalLog(tmp_path / "log") as log:
        assert log.read("s", 0, 0, 2) == (0, [(b"k", b"count=1", None), (b"k", b"count=2", None)])
        for read in (lambda: log.read("s", 0, 0, 10, whole_segments=True),
                     lambda: log.read("s", 0, 3, 10), lambda: log.read_with_offsets("s", 0, 0, 10)):
            with pytest.raises(CorruptSegmentError, match="fails its checksum") as info:
                read()
            assert (info.value.offset, info.value.span) == (2, 2)
            assert "cannot be decoded" not in str(info.value)


# -- jobs -----------------------------------------------------------------------------------------

def events(path: Path, keys: list[str]) -> Path:
    path.write_text("".join(json.dumps({"key": k, "value": {"id": i, "tag": f"tag-{k}-{i}"}})
                            + "\n" for i, k in enumerate(keys)))
    return path


def final_counts(cwd: Path) -> dict[str, int]:
    out = cli("dump", COUNTER, "counts", cwd=cwd)
    assert out.returncode == 0, out.stderr
    finals: dict[str, int] = {}
    for line in out.stdout.splitlines():
        rec = json.loads(line)
        finals[rec["key"]] = max(finals.get(rec["key"], 0), rec["value"])
    return finals


def test_a_changed_byte_in_a_changelog_fails_the_restore_instead_of_a_wrong_count(
        tmp_path: Path) -> None:
    keys = ["hot"] * 20 + [str(i) for i in range(30)]
    assert cli("load", COUNTER, "events", str(events(tmp_path / "a.jsonl", keys)),
               cwd=tmp_path).returncode == 0
    assert cli("run", COUNTER, "-q", cwd=tmp_path).returncode == 0
    assert final_counts(tmp_path)["hot"] == 20
    log = tmp_path / ".samza" / JOB / "logs" / "local"
    # the changelog entry of the count 20 now says 12; the local store is lost, so the next
    # run restores it from the changelog
    assert change_byte(log, b"log", CHANGELOG.encode() + b"\x00", b"\xc4\x03hot\xc4\x0220",
                       b"\xc4\x03hot\xc4\x0212")
    subprocess.run(["rm", "-r", str(tmp_path / ".samza" / JOB / "stores")], check=True)
    assert cli("load", COUNTER, "events", str(events(tmp_path / "b.jsonl", ["hot"])),
               cwd=tmp_path).returncode == 0
    text = one_line_error(cli("run", COUNTER, "-q", cwd=tmp_path), "run", "cannot restore",
                          f"stream '{CHANGELOG}' partition", "fails its checksum",
                          "samza-dsl reset", "another copy")
    assert "offset" in text
    assert final_counts(tmp_path)["hot"] == 20  # no count came from the changed entry


def test_a_changed_byte_in_an_input_follows_the_serde_error_policy(tmp_path: Path) -> None:
    keys = [str(i) for i in range(40)]
    assert cli("load", COUNTER, "events", str(events(tmp_path / "a.jsonl", keys)),
               cwd=tmp_path).returncode == 0
    log = tmp_path / ".samza" / JOB / "logs" / "local"
    changed = change_byte(log, b"log", b"events\x00", b"tag-7-7", b"tag-7-8")
    assert len(changed) == 1
    partition = int.from_bytes(changed[0][7:11], "big")
    with LocalLog(log) as lg:
        bad = [r[0] for r in lg.segments("events", partition)]
        span = lg.end_offset("events", partition)
    assert bad == [0]  # one segment: a load appends a partition's records in one
    one_line_error(cli("run", COUNTER, "-q", cwd=tmp_path), "run", "stream 'events'",
                   f"partition {partition}", "offset 0", "fails its checksum",
                   "streams.events.samza.serde.error")
    assert "7" not in final_counts(tmp_path)  # the changed record was not processed
    run = cli("run", COUNTER, "-q", "-c", "streams.events.samza.serde.error=skip", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert f"events partition {partition} offsets 0 to {span - 1}" in run.stderr, run.stderr
    assert "passed over" in run.stderr
    counts = final_counts(tmp_path)
    assert "7" not in counts and len(counts) == 40 - span
