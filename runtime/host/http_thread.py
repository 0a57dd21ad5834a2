"""A small HTTP server in a thread of its own, for what a supervisor or a scraper asks of a
running container: the health endpoint (``runtime.host.health``) and the Prometheus endpoint
(``runtime.host.reporters``). It answers whatever the container's event loop is doing, and costs one
thread whatever its clients do:

- one thread and one selector serve every connection;
- a connection is kept alive after its answer for the next request (HTTP/1.1's default; a
  client that sends ``Connection: close``, as ``urllib`` does, is answered and closed, and an
  HTTP/1.0 client is kept only when it asks ``Connection: keep-alive``): a service that asks
  a job many times does not pay a connection's accept and close for each request;
- at most ``max_connections`` (``MAX_CONNECTIONS``, 64) are open at once: one more closes the
  kept-alive connection that has waited longest for its next request, or, where none waits so,
  is answered 503 and closed at once;
- a connection has ``timeout`` seconds (``TIMEOUT_S``, 10) from its accept, or from its last
  answer, to send its request head (at most ``HEAD_BYTES``, 8 KiB) and take the answer; then it
  is closed, answered or not;
- a malformed request is answered 400 (431 for a head too long) with one line at debug level
  in the log, and no traceback, and its connection is closed.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable

__all__ = ["HEAD_BYTES", "MAX_CONNECTIONS", "TIMEOUT_S", "Reply", "ThreadServer"]

_log = logging.getLogger("samza_dsl.http")

MAX_CONNECTIONS = 64
TIMEOUT_S = 10.0
HEAD_BYTES = 8192
#: status, content type, body
Reply = tuple[int, str, bytes]
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}


def _text(status: int, text: str) -> Reply:
    return status, "text/plain; charset=utf-8", text.encode() + b"\n"


def _malformed(request_line: list[str], headers: list[str]) -> str:
    """What is wrong with a request head, or "" (its body is never read: a GET has none)."""
    if len(request_line) != 3 or not request_line[2].startswith("HTTP/1.") \
            or not request_line[1].startswith("/") or not request_line[0].isalpha():
        return "a request line is METHOD /path HTTP/1.1"
    names = []
    for line in headers:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or " " in name:
            return f"a header line is Name: value, not {line[:40]!r}"
        names.append(name.lower())
        if name.lower() == "content-length" and value.strip() not in ("0", ""):
            return "a request here has no body"
    if "transfer-encoding" in names:
        return "a request here has no body"
    if request_line[2] == "HTTP/1.1" and names.count("host") != 1:
        return "an HTTP/1.1 request has one Host header"
    return ""


def _keep_alive(version: str, headers: list[str]) -> bool:
    """Whether a well-formed request's connection stays open after its answer."""
    tokens: set[str] = set()
    for line in headers:
        name, _, value = line.partition(":")
        if name.lower() == "connection":
            tokens.update(t.strip().lower() for t in value.split(","))
    if version == "HTTP/1.1":
        return "close" not in tokens
    return "keep-alive" in tokens and "close" not in tokens


class _Conn:
    __slots__ = ("sock", "peer", "deadline", "head", "out", "keep", "served")

    def __init__(self, sock: socket.socket, peer: str, deadline: float) -> None:
        self.sock = sock
        self.peer = peer
        self.deadline = deadline
        self.head = b""
        self.out: bytes | None = None  # the answer, once the request is read
        #: the connection stays open for a next request once ``out`` is sent
        self.keep = False
        #: requests answered on it
        self.served = 0

    def waiting(self) -> bool:
        """Kept alive after an answer, with nothing of a next request read yet."""
        return self.served > 0 and self.out is None and not self.head


class ThreadServer:
    """Serves ``handler(method, target) -> (status, content_type, body)`` on a thread of its own
    (module docstring); with ``with_headers``, ``handler(method, target, headers)``. ``tick``, when given, is called on that thread about every
    ``tick_s`` seconds whatever comes (the health endpoint samples the loop's progress with it).
    """

    def __init__(self, handler: Callable[..., Reply], *, name: str,
                 max_connections: int = MAX_CONNECTIONS, timeout: float = TIMEOUT_S,
                 tick: Callable[[], None] | None = None, tick_s: float = 0.25,
                 with_headers: bool = False) -> None:
        self.handler = handler
        #: the handler is given the request's headers too (names in lower case)
        self.with_headers = with_headers
        self.name = name
        self.max_connections = max_connections
        self.timeout = timeout
        self.tick = tick
        self.tick_s = tick_s
        self.address: tuple[str, int] | None = None
        self._listener: socket.socket | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._conns: dict[socket.socket, _Conn] = {}
        #: connections refused at the bound and closed for their timeout, since the start
        self.refused = 0
        self.timed_out = 0

    def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on ``host``:``port`` (0: any free port) and serve; returns the address.
        Raises ``OSError`` when it cannot listen."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family, backlog=128)
        sock.setblocking(False)
        self._listener = sock
        name = sock.getsockname()
        self.address = (str(name[0]), int(name[1]))
        self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self._thread.start()
        return self.address

    def close(self, wait: float = 1.0) -> None:
        """Stop serving and close every connection (waits up to ``wait`` seconds for it)."""
        self._closing = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(wait)

    @property
    def connections(self) -> int:
        return len(self._conns)

    # -- the thread ------------------------------------------------------------------------------

    def _serve(self) -> None:
        assert self._listener is not None
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, "accept")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        next_tick = time.monotonic()
        try:
            while not self._closing:
                now = time.monotonic()
                if self.tick is not None and now >= next_tick:
                    try:
                        self.tick()
                    except Exception as exc:  # a look that failed must not stop the server
                        _log.debug("%s: tick failed: %s: %s", self.name, type(exc).__name__, exc)
                    next_tick = now + self.tick_s
                elif self.tick is None:  # nothing to call: wake for a deadline or a request
                    next_tick = now + self.tick_s
                until = min([c.deadline for c in self._conns.values()] + [next_tick])
                for key, mask in sel.select(max(0.0, min(until - now, self.tick_s))):
                    if key.data == "accept":
                        self._accept(sel)
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(64)
                    else:
                        self._step(sel, key.data, mask)
                now = time.monotonic()
                for conn in [c for c in self._conns.values() if c.deadline <= now]:
                    self.timed_out += 1
                    self._drop(sel, conn)
        finally:
            for conn in list(self._conns.values()):
                self._drop(sel, conn)
            sel.close()
            self._listener.close()
            self._wake_r.close()
            self._wake_w.close()

    def _accept(self, sel: selectors.BaseSelector) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors: the next select tries again
                _log.debug("%s: accept failed: %s", self.name, exc)
                return
            sock.setblocking(False)
            if len(self._conns) >= self.max_connections:
                idle = [c for c in self._conns.values() if c.waiting()]
                if idle:  # the kept-alive connection that waited longest makes room
                    self._drop(sel, min(idle, key=lambda c: c.deadline))
            if len(self._conns) >= self.max_connections:
                self.refused += 1
                with contextlib.suppress(OSError):
                    sock.send(self._response(*_text(
                        503, f"{self.max_connections} connections are open: try again"), False))
                sock.close()
                continue
            conn = _Conn(sock, f"{peer[0]}:{peer[1]}", time.monotonic() + self.timeout)
            self._conns[sock] = conn
            sel.register(sock, selectors.EVENT_READ, conn)

    def _step(self, sel: selectors.BaseSelector, conn: _Conn, mask: int) -> None:
        try:
            if conn.out is None:
                data = conn.sock.recv(4096)
                if not data:  # the client went before its request was whole
                    self._drop(sel, conn)
                    return
                conn.head += data
                self._answer(sel, conn)
            if conn.out is not None:
                sent = conn.sock.send(conn.out)
                conn.out = conn.out[sent:]
                if not conn.out:
                    self._sent(sel, conn)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset by the client
            self._drop(sel, conn)

    def _sent(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        """An answer sent whole: the connection closes, or waits for its next request (which
        may have come along with the last: it is answered now)."""
        if not conn.keep or self._closing:
            self._drop(sel, conn)
            return
        conn.out = None
        conn.served += 1
        conn.deadline = time.monotonic() + self.timeout
        sel.modify(conn.sock, selectors.EVENT_READ, conn)
        if conn.head:
            self._answer(sel, conn)

    def _answer(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        end, gap = conn.head.find(b"\r\n\r\n"), 4
        if end < 0:
            end, gap = conn.head.find(b"\n\n"), 2
        conn.keep = False
        if end < 0 and len(conn.head) <= HEAD_BYTES:
            return  # more to come
        if end < 0 or end > HEAD_BYTES:
            _log.debug("%s: a request head of more than %d bytes from %s: answered 431",
                       self.name, HEAD_BYTES, conn.peer)
            reply, head_only = _text(431, f"a request head holds at most {HEAD_BYTES} bytes"), False
        else:
            lines = [x.rstrip("\r") for x in conn.head[:end].decode("latin-1").split("\n")]
            parts = lines[0].split(" ")
            head_only = parts[0] == "HEAD"
            wrong = _malformed(parts, lines[1:])
            if not wrong:
                conn.keep = _keep_alive(parts[2], lines[1:])
                conn.head = conn.head[end + gap:]  # what came of a next request, if anything
            if wrong:
                _log.debug("%s: a malformed request from %s (%r): %s: answered 400", self.name,
                           conn.peer, lines[0][:80], wrong)
                reply = _text(400, f"a malformed request: {wrong}")
            else:
                try:
                    if self.with_headers:
                        heads = {n.strip().lower(): v.strip() for n, _, v in
                                 (x.partition(":") for x in lines[1:])}
                        reply = self.handler(parts[0], parts[1], heads)
                    else:
                        reply = self.handler(parts[0], parts[1])
                except Exception as exc:  # said in one line; the server goes on
                    _log.warning("%s: %s %s failed: %s: %s", self.name, parts[0], parts[1][:80],
                                 type(exc).__name__, exc)
                    reply = _text(500, f"{type(exc).__name__}: {exc}")
        conn.out = self._response(*reply, head_only, self.timeout if conn.keep else None)
        sel.modify(conn.sock, selectors.EVENT_WRITE, conn)

    @staticmethod
    def _response(status: int, content_type: str, body: bytes, head_only: bool,
                  keep_s: float | None = None) -> bytes:
        """An answer's bytes; ``keep_s``: the connection stays open that long for the next."""
        kept = "close" if keep_s is None else f"keep-alive\r\nKeep-Alive: timeout={int(keep_s)}"
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\nContent-Type: "
                f"{content_type}\r\nContent-Length: {len(body)}\r\nConnection: {kept}\r\n\r\n")
        return head.encode("latin-1") + (b"" if head_only else body)

    def _drop(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        self._conns.pop(conn.sock, None)
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_RDWR)
        conn.sock.close()
