"""The job page (``run --ui``), the Prometheus endpoint and the query endpoint of a running job
hold up against
clients that misbehave: a malformed request gets a 4xx answer and no traceback in the job's
output, a connection that sends no whole request is closed after its timeout, and the
connections held at once are bounded (the rest are answered 503), with no thread per connection.
A real ``samza-dsl run --follow`` process, real sockets on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.host.http_thread import MAX_CONNECTIONS, TIMEOUT_S
from runtime.ops.ui import IDLE_S
from runtime.ops.ui import MAX_CONNECTIONS as PAGE_CONNECTIONS

ROOT = Path(__file__).resolve().parents[2]
CLI = os.path.join(os.path.dirname(sys.executable), "samza-dsl")
COUNTER = f"{ROOT / 'examples' / 'readwrite_counter.py'}:app"

BAD_REQUESTS = [
    b"GARBAGE\r\n\r\n",
    b"GET\r\n\r\n",
    b"GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon here\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(32)) + b"\r\n\r\n",
    b"G\x00T / HTTP/1.1\r\n\r\n",
    b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nabc",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"b" * 20_000 + b"\r\n\r\n",
    b"\r\n\r\nGARBAGE\r\n\r\n",
    b"GET /%%%% HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil\r\n\r\n",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answer(port: int, data: bytes, timeout: float = 2.0) -> bytes:
    """What the server sends back to ``data`` until it closes (b"" when it closed at once),
    or what it sent within ``timeout`` (an answer on a connection kept alive)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        with contextlib.suppress(OSError):  # a server that answers before it read it all
            s.sendall(data)
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except TimeoutError:
            assert got, f"no answer to {data[:40]!r} within {timeout} s"
        except ConnectionResetError:
            pass
        return got


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.fixture
def job(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, int, int]]:
    """A running job with its page, its Prometheus endpoint and its query endpoint: (process,
    page, metrics, query)."""
    (tmp_path / "in.jsonl").write_text("".join(
        json.dumps({"key": f"k{i % 7}", "value": i}) + "\n" for i in range(50)))
    load = subprocess.run([CLI, "load", COUNTER, "events", "in.jsonl"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert load.returncode == 0, load.stderr
    page, metrics, query = _free_port(), _free_port(), _free_port()
    proc = subprocess.Popen(
        [CLI, "run", COUNTER, "--follow", "-q", "--ui", str(page), "-c",
         "metrics.reporters=prometheus", "-c", f"metrics.reporter.prometheus.port={metrics}",
         "-c", "query.enabled=true", "-c", f"query.port={query}"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 40
        while True:
            try:
                for url in (f"http://127.0.0.1:{page}/api/state",
                            f"http://127.0.0.1:{metrics}/metrics",
                            f"http://127.0.0.1:{query}/query/counts?key=k3"):
                    with urllib.request.urlopen(url, timeout=2) as r:
                        assert r.status == 200
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, \
                    "the job page, /metrics and /query never answered"
                time.sleep(0.2)
        yield proc, page, metrics, query
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def test_a_malformed_request_is_answered_4xx_with_no_traceback_in_the_jobs_output(
        job: tuple[subprocess.Popen[str], int, int, int]) -> None:
    proc, page, metrics, query = job
    for port in (page, metrics, query):
        for data in BAD_REQUESTS:
            got = _answer(port, data)
            # answered with a client error, or closed without an answer: never a 2xx or 5xx
            assert got == b"" or got.startswith(b"HTTP/1.1 4") or got.startswith(
                b"HTTP/1.0 4"), (port, data[:40], got[:200])
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as r:
        assert b"samza_container_process_envelopes_total" in r.read()
    with urllib.request.urlopen(f"http://127.0.0.1:{query}/query/counts?key=k3", timeout=5) as r:
        assert json.loads(r.read())["found"] is True
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "aiohttp" not in err, err[-3000:]
    assert len(err.splitlines()) <= 2 * len(BAD_REQUESTS), err[-3000:]  # one line each at most


def test_idle_connections_are_closed_and_open_ones_bounded_without_a_thread_each(
        job: tuple[subprocess.Popen[str], int, int, int]) -> None:
    proc, page, metrics, query = job
    threads = _threads(proc.pid)
    held: dict[int, list[socket.socket]] = {page: [], metrics: [], query: []}
    refused = {page: 0, metrics: 0, query: 0}
    try:
        for port, bound in ((page, PAGE_CONNECTIONS), (metrics, MAX_CONNECTIONS),
                            (query, MAX_CONNECTIONS)):
            for i in range(bound + 16):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                if i % 2:  # half of them start a request and never finish it
                    s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                held[port].append(s)
            time.sleep(1.0)
            # those past the bound are answered 503 and closed at once: the ones with something
            # to read, found in one select (the others stay open with nothing sent)
            ready, _, _ = select.select(held[port], [], [], 0.05)
            for s in ready:
                s.settimeout(5)
                got = s.recv(4096)
                assert got.startswith(b"HTTP/1.1 503"), got[:200]
                refused[port] += 1
            assert refused[port] == 16, (port, refused)
        # no thread per connection (the job's own may come and go: a margin of 2)
        assert _threads(proc.pid) <= threads + 2, (threads, _threads(proc.pid))
        # every connection still open is closed by the server once its time has passed
        deadline = time.monotonic() + max(IDLE_S, TIMEOUT_S) + 8
        open_ = [s for port in held for s in held[port]]
        while open_:
            assert time.monotonic() < deadline, f"{len(open_)} idle connections still open"
            ready, _, _ = select.select(open_, [], [], 0.2)
            closed = set()
            for s in ready:
                try:
                    if not s.recv(4096):  # an answer before the close: the close comes next
                        closed.add(s)
                except OSError:  # reset: closed
                    closed.add(s)
            open_ = [s for s in open_ if s not in closed]
        # and the endpoints answer as before
        for url in (f"http://127.0.0.1:{page}/api/state", f"http://127.0.0.1:{metrics}/metrics",
                    f"http://127.0.0.1:{query}/query/counts?key=k3"):
            with urllib.request.urlopen(url, timeout=5) as r:
                assert r.status == 200
    finally:
        for sockets in held.values():
            for s in sockets:
                s.close()


def test_a_server_with_nothing_to_tick_sleeps_while_no_client_comes() -> None:
    """The Prometheus endpoint's and the query endpoint's server has no tick: idle, its thread
    waits in select, not in a loop that takes a core from the job."""
    from runtime.host.http_thread import ThreadServer

    server = ThreadServer(lambda method, target: (200, "text/plain", b"ok\n"), name="idle")
    server.start("127.0.0.1", 0)
    try:
        t0 = time.process_time()
        time.sleep(1.0)
        used = time.process_time() - t0
    finally:
        server.close()
    assert used < 0.1, f"an idle server used {used:.2f} s of CPU in 1 s"
