"""For the Kafka outage tests: a TCP proxy in front of a broker, to cut the job off from a broker
that keeps its data (tansu keeps its topics in memory only), and a job run in a process of its
own with its output collected."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from tests.proc_helpers import wait_or_dump

ROOT = Path(__file__).resolve().parents[2]
APP = "tests/kafka/kafka_apps.py:app"


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target``. ``stop()`` closes the listener and
    every connection (the broker is away: connections are refused); ``start()`` listens on the
    same port again. ``start(only=client_id)`` lets through only the connections whose first
    Kafka request comes from that client id (the test's own clients, while the job's are cut
    off)."""

    def __init__(self, port: int, target: int) -> None:
        self.port = port
        self.target = target
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.only: bytes | None = None

    def start(self, only: str | None = None) -> TcpProxy:
        self.only = None if only is None else only.encode()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.setblocking(False)
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, args=(listener,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    # -- what a subclass may change -----------------------------------------------------------

    def _serving(self) -> bool:
        """Whether the proxy goes on serving."""
        return not self._stop.is_set()

    def _admit(self, client: socket.socket) -> bool:
        """Whether a new connection gets through."""
        return self.only is None or _client_id(client) == self.only

    def _to_broker(self, data: bytes) -> bool:
        """Whether ``data`` from a client goes on to the broker."""
        return True

    def _closed(self) -> None:
        """Every connection and the listener are closed."""

    def _serve(self, listener: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ, None)
        peers: dict[socket.socket, socket.socket] = {}
        clients: set[socket.socket] = set()

        def drop(s: socket.socket) -> None:
            for x in (s, peers.pop(s, None)):
                if x is not None:
                    peers.pop(x, None)
                    clients.discard(x)
                    with contextlib.suppress(Exception):
                        sel.unregister(x)
                    x.close()
        try:
            while self._serving():
                for key, _ in sel.select(0.05):
                    s = key.fileobj
                    assert isinstance(s, socket.socket)
                    if s is listener:
                        client, _ = listener.accept()
                        if not self._admit(client):
                            client.close()
                            continue
                        try:
                            upstream = socket.create_connection(("127.0.0.1", self.target), 2)
                        except OSError:
                            client.close()
                            continue
                        for x in (client, upstream):
                            x.setblocking(True)
                            x.settimeout(5)
                            sel.register(x, selectors.EVENT_READ, None)
                        peers[client], peers[upstream] = upstream, client
                        clients.add(client)
                        continue
                    try:
                        data = s.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        drop(s)
                        continue
                    if s in clients and not self._to_broker(data):
                        continue
                    try:
                        peers[s].sendall(data)
                    except (OSError, KeyError):
                        drop(s)
        finally:
            for s in list(peers):
                drop(s)
            sel.close()
            listener.close()
            self._closed()


@contextlib.contextmanager
def tansu_behind_proxy(log: Path) -> Iterator[tuple[str, TcpProxy]]:
    """tansu behind a ``TcpProxy``: the bootstrap (the proxy's port) and the proxy, whose
    ``stop()`` takes the broker away from its clients while it keeps its data."""
    from kafka_helpers import free_port

    from samza_dsl.testing.kafka_broker import TansuBroker

    port, behind = free_port(), free_port()
    proxy = TcpProxy(port, behind).start()
    broker = TansuBroker(log, port=behind, advertised_port=port)
    try:
        broker.start()
        yield f"127.0.0.1:{port}", proxy
    finally:
        broker.stop()
        proxy.stop()


class JobProcess:
    """``samza-dsl run APP --follow`` of ``kafka_apps.regroup_app`` in a process of its own."""

    started = 0

    def __init__(self, bootstrap: str, tag: str, job_dir: Path, *config: str) -> None:
        env = {**os.environ, "SAMZA_TEST_BOOTSTRAP": bootstrap, "SAMZA_TEST_TAG": tag,
               "PYTHONPATH": str(ROOT)}
        JobProcess.started += 1
        self.log = job_dir.parent / f"{job_dir.name}-{JobProcess.started}.log"
        self._out = self.log.open("w")
        args = ["-c", f"job.dir={job_dir}", "-c", "task.commit.ms=100"]
        for c in config:
            args += ["-c", c]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.ops.cli", "run", APP, "--follow", "-q", *args],
            cwd=ROOT, env=env, stdout=self._out, stderr=subprocess.STDOUT)

    def wait(self, timeout: float) -> int:
        try:
            return wait_or_dump(self.proc, timeout, self.output)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._out.close()

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.wait(timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.wait(10)


def wait_until(what: str, check: object, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.1)


def _client_id(client: socket.socket) -> bytes | None:
    """The client id of the first request on a connection, left unread: a request header is
    size (4 bytes), api key (2), version (2), correlation id (4), then the client id, a string
    of 2 bytes' length."""
    client.settimeout(2)
    deadline = time.monotonic() + 2
    try:
        while time.monotonic() < deadline:
            head = client.recv(512, socket.MSG_PEEK)
            if not head:
                return None
            if len(head) >= 14:
                n = int.from_bytes(head[12:14], "big", signed=True)
                if n < 0:
                    return None
                if len(head) >= 14 + n:
                    return head[14:14 + n]
            time.sleep(0.01)
    except OSError:
        return None
    return None
