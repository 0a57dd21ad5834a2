"""The endpoints' HTTP server (``runtime.host.http_thread``) keeps a connection open after its
answer for the client's next request, as HTTP/1.1 asks, and ``QueryClient`` reuses it: a
service that queries a job many times pays one connection, not one per query. Real sockets on
127.0.0.1."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from runtime.host.http_thread import ThreadServer
from samza_dsl.query import QueryClient


def _handler(method: str, target: str) -> tuple[int, str, bytes]:
    return 200, "application/json", json.dumps({"target": target, "found": True}).encode()


@pytest.fixture
def server() -> Iterator[ThreadServer]:
    s = ThreadServer(_handler, name="keep-alive-test", max_connections=4, timeout=1.0)
    s.start("127.0.0.1", 0)
    try:
        yield s
    finally:
        s.close()


def _port(server: ThreadServer) -> int:
    assert server.address is not None
    return server.address[1]


def _until(check: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _read_answer(sock: socket.socket) -> bytes:
    """One whole answer (head and a body of its Content-Length) from ``sock``, nothing of the
    next (a socket's file buffers what came of it)."""
    f: Any = _files.setdefault(sock, sock.makefile("rb"))
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = f.readline()
        assert line, head
        head += line
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    return head + f.read(length)


_files: dict[socket.socket, object] = {}


def test_requests_on_one_connection_are_each_answered(server: ThreadServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", _port(server), timeout=5)
    try:
        for i in range(5):
            conn.request("GET", f"/q?key={i}")
            resp = conn.getresponse()
            assert resp.status == 200
            assert json.loads(resp.read())["target"] == f"/q?key={i}"
            assert resp.getheader("Connection") == "keep-alive"
            assert not resp.will_close
        assert server.connections == 1
    finally:
        conn.close()


def test_pipelined_requests_are_answered_in_order(server: ThreadServer) -> None:
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=5) as s:
        s.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
        first, second = _read_answer(s), _read_answer(s)
    assert first.endswith(b'"/a", "found": true}') and second.endswith(b'"/b", "found": true}')


@pytest.mark.parametrize("request_head", [
    b"GET /q HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"GET /q HTTP/1.0\r\n\r\n",
    b"GET /q HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",  # malformed: 400, then closed
])
def test_a_client_that_asks_to_close_or_sends_a_bad_request_is_answered_and_closed(
        server: ThreadServer, request_head: bytes) -> None:
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=5) as s:
        s.sendall(request_head)
        got = b""
        while chunk := s.recv(4096):  # until the server closes it
            got += chunk
    assert b"Connection: close\r\n" in got, got
    assert got.startswith(b"HTTP/1.1 200" if b"Host: y" not in request_head
                          else b"HTTP/1.1 400"), got


def test_a_kept_connection_idle_past_the_timeout_is_closed(server: ThreadServer) -> None:
    with socket.create_connection(("127.0.0.1", _port(server)), timeout=5) as s:
        s.sendall(b"GET /q HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = _read_answer(s)
        assert answer.startswith(b"HTTP/1.1 200") and b"\r\nKeep-Alive: timeout=1\r\n" in answer
        started = time.monotonic()
        assert s.recv(4096) == b""  # closed by the server
        assert 0.5 < time.monotonic() - started < 3.0
    _until(lambda: server.connections == 0)


def test_a_new_client_at_the_bound_takes_the_place_of_a_kept_idle_one(
        server: ThreadServer) -> None:
    kept = []
    try:
        for _ in range(4):  # the bound: each answered once, then kept waiting
            s = socket.create_connection(("127.0.0.1", _port(server)), timeout=5)
            s.sendall(b"GET /q HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_answer(s).startswith(b"HTTP/1.1 200")
            kept.append(s)
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=5) as new:
            new.sendall(b"GET /new HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_answer(new).startswith(b"HTTP/1.1 200")
        assert kept[0].recv(4096) == b""  # the one that waited longest was closed
        assert server.refused == 0
    finally:
        for s in kept:
            s.close()


def test_half_sent_requests_at_the_bound_still_refuse_a_new_client(server: ThreadServer) -> None:
    held = []
    try:
        for _ in range(4):  # none answered yet: none is a kept idle connection
            s = socket.create_connection(("127.0.0.1", _port(server)), timeout=5)
            s.sendall(b"GET /q HTTP/1.1\r\nHost: x\r\n")
            held.append(s)
        _until(lambda: server.connections == 4)
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=5) as new:
            assert new.recv(4096).startswith(b"HTTP/1.1 503")
        assert server.refused == 1
    finally:
        for s in held:
            s.close()


def test_the_query_client_reuses_its_connection_and_opens_another_once_it_was_closed(
        server: ThreadServer) -> None:
    url = f"http://127.0.0.1:{_port(server)}"
    with QueryClient([url], timeout=5) as client:
        for i in range(5):
            assert client._ask(url, "counts", {"key": str(i)})[0] == 200
        assert server.connections == 1
        _until(lambda: server.connections == 0)  # the server's idle timeout closed it
        status, body = client._ask(url, "counts", {"key": "again"})
        assert status == 200 and body["target"] == "/query/counts?key=again"
        assert server.connections == 1
    _until(lambda: server.connections == 0)  # closed by the client's close
