"""The progress display of ``samza-dsl run``, through the real console script: plain lines with no
escape codes off a terminal, a ``rich`` table as wide as the terminal on one, the rate of the last
seconds, a row per container, and what a waiting container waits for."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "samza-dsl")
VIEWS = str(ROOT / "examples" / "reprocess_page_views.py") + ":app"
COUNTER = str(ROOT / "examples" / "readwrite_counter.py") + ":app"
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ROW = re.compile(r"processed\s+([\d,]+)\s+([\d,]+) msg/s \(last 5 s\)")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def stopped_after(seconds: float, *args: str, cwd: Path, code: int = 0) -> str:
    """Standard error of a run stopped with SIGINT (as Ctrl-C) after ``seconds``; ``code`` is
    its exit code (0 for a run under --follow, 130 for a bounded run stopped before its end)."""
    proc = subprocess.Popen([CLI, *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(seconds)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    return err


def test_off_a_terminal_each_update_is_a_plain_line(tmp_path: Path) -> None:
    proc = run("run", VIEWS, "--sample", "3000", "-c", "task.progress.ms=100", cwd=tmp_path)
    assert not ESCAPE.search(proc.stderr) and "\r" not in proc.stderr
    rows = [ln for ln in proc.stderr.splitlines() if ROW.search(ln)]
    assert rows and all("late" in ln for ln in rows)
    assert "done; checkpoint" in rows[-1]


def test_the_rate_is_that_of_the_last_seconds_under_follow(tmp_path: Path) -> None:
    run("run", COUNTER, "--sample", "20000", "-q", cwd=tmp_path)
    run("reset", COUNTER, cwd=tmp_path)  # processes the 20,000 again, under --follow
    err = stopped_after(9, "run", COUNTER, "--follow", "-c", "task.progress.ms=250", cwd=tmp_path)
    rows = [(int(m.group(1).replace(",", "")), int(m.group(2).replace(",", "")))
            for m in map(ROW.search, err.splitlines()) if m]
    assert rows[-1][0] == 20000, rows[-3:]
    assert max(r for _, r in rows) > 0  # while it processed
    # 5 s after the last message: none in the last 5 s (an average over the whole run would
    # still be 20,000 / 9 s), and the container says what it waits for
    assert rows[-1][1] == 0 and rows[-2][1] == 0, rows[-6:]
    # the last row before the stop: after SIGINT a tick may already show the drained tasks as
    # done, before the final row
    before_stop = [ln for ln in err.splitlines() if ROW.search(ln) and "done;" not in ln][-1]
    assert "waiting for new input on events" in before_stop, before_stop


def test_under_follow_in_a_pipe_a_change_of_state_is_a_line_not_every_tick(
        tmp_path: Path) -> None:
    run("run", COUNTER, "--sample", "2000", "-q", cwd=tmp_path)
    run("reset", COUNTER, cwd=tmp_path)  # processes the 2,000 again, under --follow
    err = stopped_after(8, "run", COUNTER, "--follow", "-c", "task.progress.ms=100", cwd=tmp_path)
    rows = [ln for ln in err.splitlines() if ROW.search(ln)]
    waiting = [ln for ln in rows if "waiting for new input on events" in ln]
    # about 80 ticks, most of them waiting: the wait is said when it begins and when the rate
    # has fallen to 0 (idle), then nothing until the state changes (here: the stop)
    assert 1 <= len(waiting) <= 2, rows
    assert ROW.search(waiting[-1]).group(2) == "0"  # type: ignore[union-attr]
    assert len(rows) <= 6, rows
    assert "done; checkpoint" in rows[-1]


def test_a_row_per_container_and_a_lone_container_says_what_it_waits_for(
        tmp_path: Path) -> None:
    both = run("run", VIEWS, "--sample", "2000", "--containers", "2", "-c",
               "task.progress.ms=100", cwd=tmp_path)
    for i in (0, 1):
        assert any(ln.startswith(f"container {i} of 2: processed") for ln in
                   both.stderr.splitlines()), both.stderr
    assert not ESCAPE.search(both.stderr)

    run("run", VIEWS, "--sample", "500", "--append", "-q", "--containers", "2", cwd=tmp_path)
    (tmp_path / "more.jsonl").write_text(run("sample", VIEWS, "page-views", "300",
                                             cwd=tmp_path).stdout)
    run("load", VIEWS, "page-views", "more.jsonl", cwd=tmp_path)
    # a bounded run whose other container never comes: stopped before its end, interrupted
    err = stopped_after(4, "run", VIEWS, "--containers", "2", "--container-id", "0", "-c",
                        "task.progress.ms=200", cwd=tmp_path, code=130)
    assert "interrupted by SIGINT before its inputs ended" in err, err
    waiting = [ln for ln in err.splitlines() if "waiting for" in ln]
    assert waiting, err
    assert waiting[-1].startswith("container 0 of 2: processed")
    assert ("waiting for the end of country-views-1-partition_by-by-country (2 partition(s)) "
            "from other containers of 2: are they all running?") in waiting[-1]


def _on_terminal(columns: int, *args: str, cwd: Path) -> str:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen([CLI, *args], cwd=cwd, stdin=slave, stdout=subprocess.PIPE,
                            stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the other end closed
            break
        if not data:
            break
        out += data
    os.close(master)
    assert proc.wait(timeout=60) == 0, out.decode(errors="replace")
    return out.decode()


def test_on_a_terminal_it_is_a_table_as_wide_as_the_terminal(tmp_path: Path) -> None:
    for columns in (60, 80):
        screen = _on_terminal(columns, "run", VIEWS, "--sample", "3000", "--replace", "--show",
                              "0", "--containers", "2", "-c", "task.progress.ms=100",
                              cwd=tmp_path)
        assert "\x1b[" in screen  # drawn in place
        lines = [ln for ln in ESCAPE.sub("", screen).replace("\r", "\n").splitlines()
                 if ln.strip()]
        table = [ln for ln in lines if "container" in ln or ln.startswith("container ")]
        assert any("msg/s" in ln for ln in lines), lines
        assert sum(1 for ln in table if ln.startswith("container 0 of")) >= 1
        assert sum(1 for ln in table if ln.startswith("container 1 of")) >= 1
        progress = [ln for ln in lines if "msg/s" in ln or re.match(r"container \d+ of", ln)]
        assert progress and all(len(ln) <= columns for ln in progress), \
            [ln for ln in progress if len(ln) > columns]


def _on_terminal_until(columns: int, phrase: str, *args: str, cwd: Path) -> str:
    """What a run under ``--follow`` draws on a terminal ``columns`` wide, stopped with Ctrl-C
    (SIGINT to its process group) once ``phrase`` has been drawn."""
    import select

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen([CLI, *args], cwd=cwd, stdin=slave, stdout=subprocess.PIPE,
                            stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 90
    stopped = False
    try:
        while True:
            if not select.select([master], [], [], 0.2)[0]:
                if time.monotonic() > deadline:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # the other end closed
                break
            if not data:
                break
            out += data
            if not stopped and phrase in " ".join(_status_texts(out.decode(errors="replace"))):
                stopped = True
                os.killpg(proc.pid, signal.SIGINT)
    finally:
        os.close(master)
        if proc.poll() is None and not stopped:
            os.killpg(proc.pid, signal.SIGKILL)
    assert stopped, f"{phrase!r} was never drawn:\n{ESCAPE.sub('', out.decode(errors='replace'))}"
    assert proc.wait(timeout=60) == 0, out.decode(errors="replace")
    return out.decode(errors="replace")


def _status_texts(screen: str) -> list[str]:
    """The status of each row of each table drawn, its wrapped lines joined."""
    texts: list[str] = []
    at = None
    for line in ESCAPE.sub("", screen).replace("\r", "\n").splitlines():
        if "msg/s" in line and line.rstrip().endswith("status"):
            at = line.index("status")
        elif at is not None and line.strip():
            if line[:at].strip() or not texts:  # a row; else the status of the row above wraps
                texts.append("")
            texts[-1] = f"{texts[-1]} {line[at:].strip()}".strip()
    return texts


def test_at_80_columns_the_status_says_what_a_container_waits_for(tmp_path: Path) -> None:
    run("run", VIEWS, "--sample", "3000", "-q", "--show", "0", cwd=tmp_path)
    (tmp_path / "more.jsonl").write_text(run("sample", VIEWS, "page-views", "300",
                                             cwd=tmp_path).stdout)
    for containers in ("1", "2"):
        run("load", VIEWS, "page-views", "more.jsonl", cwd=tmp_path)
        # under --follow the reason is new input, first and whole (not the end of the
        # intermediate stream, which comes only with new input), also when it has to wrap
        screen = _on_terminal_until(80, "waiting for new input on page-views", "run", VIEWS,
                                    "--follow", "--show", "0", "--containers", containers, "-c",
                                    "task.progress.ms=100", cwd=tmp_path)
        texts = _status_texts(screen)
        waiting = [t for t in texts if "waiting" in t]
        assert waiting and all("…" not in t for t in waiting), texts  # never cut
        assert all(t.startswith("waiting for new input on page-views") for t in waiting), waiting
        assert not any("the end of" in t for t in texts), texts
        lines = ESCAPE.sub("", screen).replace("\r", "\n").splitlines()
        assert all(len(ln) <= 80 for ln in lines if "msg/s" in ln or "waiting" in ln)
