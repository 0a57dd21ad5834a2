"""Storage faults tell the truth: a truncated log is an error naming the file (not a SIGBUS), a
log emptied under a job with state is an error (not a silent new start), a full or read-only
disk says so and names the path without advising to delete anything, and a load is all or
nothing. Real processes, real LMDB files, a real small tmpfs (mounting needs root)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest

from runtime.host.storage import StorageError, storage_error

ROOT = Path(__file__).resolve().parents[2]
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
COUNTER = f"{ROOT / 'examples' / 'readwrite_counter.py'}:app"
JOB = "readwrite-counter-1"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def events(path: Path, start: int, n: int, pad: int = 0) -> Path:
    path.write_text("".join(json.dumps({"key": str(i), "value": {"id": i, "pad": "x" * pad}})
                            + "\n" for i in range(start, start + n)))
    return path


def clean_error(proc: subprocess.CompletedProcess[str], command: str, *fragments: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)  # not -7: no SIGBUS
    assert proc.stderr.startswith(f"samza-dsl {command}: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, f"{fragment!r} not in {proc.stderr!r}"
    return proc.stderr


def no_deletion_advice(text: str) -> None:
    assert "delete" not in text.lower() and "rm " not in text and "corrupt" not in text, text


def final_counts(cwd: Path) -> dict[str, int]:
    out = cli("dump", COUNTER, "counts", cwd=cwd)
    assert out.returncode == 0, out.stderr
    finals: dict[str, int] = {}
    for line in out.stdout.splitlines():
        rec = json.loads(line)
        finals[rec["key"]] = max(finals.get(rec["key"], 0), rec["value"])
    return finals


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs: a disk to fill and to remount read-only."""
    if os.geteuid() != 0:
        pytest.fail("these tests mount a tmpfs to fill a disk and make it read-only: run them "
                    "as root (CI does)")
    path = tmp_path / "disk"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=True)


def remount(path: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True)


# -- truncated and emptied logs -------------------------------------------------------------------

@pytest.mark.parametrize("keep", ["half", "one page", "50 bytes"])
def test_a_truncated_log_is_an_error_naming_the_file_not_a_sigbus(tmp_path: Path,
                                                                  keep: str) -> None:
    data = events(tmp_path / "e.jsonl", 0, 3000, pad=50)
    assert cli("load", COUNTER, "events", str(data), cwd=tmp_path).returncode == 0
    assert cli("run", COUNTER, "-q", cwd=tmp_path).returncode == 0
    mdb = tmp_path / ".samza" / JOB / "logs" / "local" / "data.mdb"
    os.truncate(mdb, {"half": mdb.stat().st_size // 2, "one page": 4096, "50 bytes": 50}[keep])
    for args in (("run", COUNTER, "-q"), ("dump", COUNTER, "events"),
                 ("load", COUNTER, "events", str(data))):
        text = clean_error(cli(*args, cwd=tmp_path), args[0], str(mdb), "is truncated",
                           "backup")
        assert "samza-dsl reset" in text


def test_an_emptied_log_is_an_error_until_the_job_is_reset(tmp_path: Path) -> None:
    data = events(tmp_path / "e.jsonl", 0, 200)
    assert cli("load", COUNTER, "events", str(data), cwd=tmp_path).returncode == 0
    assert cli("run", COUNTER, "-q", cwd=tmp_path).returncode == 0
    log = tmp_path / ".samza" / JOB / "logs" / "local"
    os.truncate(log / "data.mdb", 0)
    for args in (("run", COUNTER, "-q"), ("dump", COUNTER, "counts"),
                 ("load", COUNTER, "events", str(data))):
        clean_error(cli(*args, cwd=tmp_path), args[0], f"the local log at {log} does not hold "
                    f"job '{JOB}'", "log.id", "samza-dsl reset")
    reset = cli("reset", COUNTER, cwd=tmp_path)
    assert reset.returncode == 0, reset.stderr
    assert cli("load", COUNTER, "events", str(data), cwd=tmp_path).returncode == 0
    assert cli("run", COUNTER, "-q", cwd=tmp_path).returncode == 0
    assert final_counts(tmp_path) == {str(i): 1 for i in range(200)}  # started over


def test_a_removed_log_under_stores_of_an_older_job_dir_is_an_error(tmp_path: Path) -> None:
    assert cli("load", COUNTER, "events", str(events(tmp_path / "e.jsonl", 0, 20)),
               cwd=tmp_path).returncode == 0
    assert cli("run", COUNTER, "-q", cwd=tmp_path).returncode == 0
    job = tmp_path / ".samza" / JOB
    (job / "log.id").unlink()  # as a job dir written before log.id existed
    for f in (job / "logs" / "local").iterdir():
        if f.is_file():  # the LMDB files; the job's lock files stay in locks/
            f.unlink()
    clean_error(cli("run", COUNTER, "-q", cwd=tmp_path), "run", str(job / "stores"),
                "never seen a run")


# -- a full disk ----------------------------------------------------------------------------------

def test_a_full_disk_fails_a_load_whole_and_names_the_path(disk: Path) -> None:
    first = events(disk.parent / "first.jsonl", 0, 3000, pad=100)
    assert cli("load", COUNTER, "events", str(first), cwd=disk).returncode == 0
    big = events(disk.parent / "big.jsonl", 3000, 30000, pad=100)
    text = clean_error(cli("load", COUNTER, "events", str(big), cwd=disk), "load",
                       "no space left on the device", str(disk / ".samza" / JOB / "logs"),
                       "nothing of the 30000 message(s) was appended", "all or nothing")
    no_deletion_advice(text)
    dump = cli("dump", COUNTER, "events", cwd=disk)
    assert dump.returncode == 0 and len(dump.stdout.splitlines()) == 3000  # not 16384 more
    remount(disk, "size=32m")
    again = cli("load", COUNTER, "events", str(big), cwd=disk)
    assert again.returncode == 0, again.stderr
    dump = cli("dump", COUNTER, "events", cwd=disk)
    assert len(dump.stdout.splitlines()) == 33000


def test_a_disk_filling_up_during_a_run_says_so_and_the_run_resumes(disk: Path) -> None:
    data = events(disk.parent / "e.jsonl", 0, 10000, pad=60)
    assert cli("load", COUNTER, "events", str(data), cwd=disk).returncode == 0
    st = os.statvfs(disk)
    remount(disk, f"size={(st.f_blocks - st.f_bfree) * st.f_frsize + (256 << 10)}")
    text = clean_error(cli("run", COUNTER, "-q", cwd=disk), "run", "no space left on the device",
                       str(disk / ".samza" / JOB))
    no_deletion_advice(text)
    remount(disk, "size=32m")
    rerun = cli("run", COUNTER, "-q", cwd=disk)
    assert rerun.returncode == 0, rerun.stderr
    assert final_counts(disk) == {str(i): 1 for i in range(10000)}  # each event counted once


# -- a read-only disk -----------------------------------------------------------------------------

def test_a_read_only_disk_says_so_and_names_the_path(disk: Path) -> None:
    data = events(disk.parent / "e.jsonl", 0, 100)
    assert cli("load", COUNTER, "events", str(data), cwd=disk).returncode == 0
    assert cli("run", COUNTER, "-q", cwd=disk).returncode == 0
    remount(disk, "ro")
    try:
        for args in (("run", COUNTER, "-q"), ("load", COUNTER, "events", str(data)),
                     ("reset", COUNTER), ("dump", COUNTER, "counts")):
            text = clean_error(cli(*args, cwd=disk), args[0], "read-only file system",
                               str(disk / ".samza" / JOB), "Remount it read-write")
            no_deletion_advice(text)
    finally:
        remount(disk, "rw")
    assert final_counts(disk) == {str(i): 1 for i in range(100)}  # all still there


# -- the messages ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("exc", "code", "phrase"), [
    (lmdb.ReadonlyError("mdb_txn_begin: Permission denied"), errno.EACCES, "permission denied"),
    (lmdb.Error("/x: Read-only file system"), errno.EROFS, "read-only file system"),
    (lmdb.DiskError("mdb_txn_commit: No space left on device"), errno.ENOSPC, "no space left"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), errno.EDQUOT, "disk quota exceeded"),
    (PermissionError(errno.EACCES, "Permission denied"), errno.EACCES, "permission denied"),
])
def test_faults_are_named_with_the_path_and_never_advise_deleting(
        tmp_path: Path, exc: BaseException, code: int, phrase: str) -> None:
    err = storage_error(exc, str(tmp_path / "log"), "appending to 'events' partition 0")
    assert isinstance(err, StorageError) and err.errno == code
    text = str(err)
    assert phrase in text and str(tmp_path / "log") in text and "appending to 'events'" in text
    no_deletion_advice(text)


def test_an_io_error_with_room_on_the_disk_is_an_io_error(tmp_path: Path) -> None:
    err = storage_error(lmdb.DiskError("mdb_txn_commit: Input/output error"), str(tmp_path),
                        "syncing")
    assert err is not None and err.errno == errno.EIO and "I/O error" in str(err)
    assert storage_error(lmdb.CorruptedError("MDB_CORRUPTED"), str(tmp_path), "x") is None


def test_a_job_dir_without_write_permission_says_so_and_names_the_path(tmp_path: Path) -> None:
    """EACCES for real: the commands run without the capability that lets root ignore file
    permissions (setpriv drops it), on a job.dir made read-only for its owner."""
    if os.geteuid() != 0:
        pytest.fail("this test drops root's permission override with setpriv: run it as root "
                    "(CI does)")
    data = events(tmp_path / "e.jsonl", 0, 100)
    work = tmp_path / "work"
    work.mkdir()
    assert cli("load", COUNTER, "events", str(data), cwd=work).returncode == 0
    assert cli("run", COUNTER, "-q", cwd=work).returncode == 0
    job = work / ".samza" / JOB
    modes = {p: p.stat().st_mode for p in [job, *job.rglob("*")]}
    for p in modes:
        p.chmod(0o555 if p.is_dir() else 0o444)
    unprivileged = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]
    try:
        for args in (("run", COUNTER, "-q"), ("load", COUNTER, "events", str(data)),
                     ("reset", COUNTER)):
            proc = subprocess.run([*unprivileged, CLI, *args], cwd=work, capture_output=True,
                                  text=True, timeout=120)
            text = clean_error(proc, args[0], "permission denied", str(job), "read and write")
            no_deletion_advice(text)
    finally:
        for p, mode in modes.items():
            p.chmod(mode)
    assert final_counts(work) == {str(i): 1 for i in range(100)}  # all still there


def test_a_load_larger_than_a_transaction_that_fills_the_disk_says_what_went_in(disk: Path
                                                                               ) -> None:
    remount(disk, "size=14m")
    big = events(disk.parent / "big.jsonl", 0, 10000, pad=2000)  # about 20 MB: three commits
    text = clean_error(cli("load", COUNTER, "events", str(big), cwd=disk), "load",
                       "no space left on the device", "were appended to stream 'events'",
                       f"the last of them from {big}:", "load the lines after it")
    no_deletion_advice(text)
    done = int(text.split("the first ")[1].split(" message(s)")[0].replace(",", ""))
    line = int(text.split(f"{big}:")[1].split(";")[0])
    assert 0 < done < 10000 and line == done  # one message a line: a prefix of the file
    dump = cli("dump", COUNTER, "events", cwd=disk)
    assert dump.returncode == 0, dump.stderr
    assert sorted(json.loads(x)["key"] for x in dump.stdout.splitlines()) == sorted(
        str(i) for i in range(done))
