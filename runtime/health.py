"""A container's health endpoint, for a supervisor's probes (Kubernetes' liveness and readiness).

With ``job.health.port`` set (0 picks a free port), each container serves, on
``job.health.host`` (default 127.0.0.1):

- ``GET /healthz``: 200 while the container's event loop answers. It is served by that loop, so
  a loop stuck in a blocking call does not answer, and the probe times out.
- ``GET /ready``: 200 once the container's tasks are assigned and their stores restored, 503
  before that and while it stops.

Both answer a small JSON object: ``{"state": "starting" | "restoring" | "running" |
"stopping" | "stopped", "ready": bool, "tasks": N}``. Container ``i`` of a run of several on
one host (``--containers N``) serves on port + i, as the Prometheus endpoint does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from samza_dsl.config import config_value
from samza_dsl.errors import SamzaError

__all__ = ["HealthServer", "health_address"]

_log = logging.getLogger("samza_dsl.health")

#: a request's head is read within this many seconds, and holds at most this many bytes
_READ_SECONDS = 5.0
_HEAD_BYTES = 8192
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


def health_address(config: Mapping[str, Any], container_index: int = 0
                   ) -> tuple[str, int] | None:
    """Where a container serves its health endpoint (``job.health.host``/``port``), or None
    when ``job.health.port`` is unset (-1)."""
    port = int(config_value(config, "job.health.port"))
    if port < 0:
        return None
    host = str(config_value(config, "job.health.host"))
    return host, port + container_index if port else 0


class HealthServer:
    """Answers ``/healthz`` and ``/ready`` from ``state()``, on the running loop.

    Args:
        state: the container's state now: ``(name, ready, tasks)``.
    """

    def __init__(self, state: Callable[[], tuple[str, bool, int]]) -> None:
        self.state = state
        self.address: tuple[str, int] | None = None
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        try:
            self._server = await asyncio.start_server(self._serve, host, port)
        except OSError as exc:
            raise SamzaError(f"job.health.port: cannot listen on {host}:{port}: "
                             f"{exc.strerror or exc}; set job.health.port to a free port (0 "
                             f"picks one) or -1 for no health endpoint") from None
        sock = self._server.sockets[0].getsockname()
        self.address = (str(sock[0]), int(sock[1]))
        _log.info("health endpoint at http://%s:%d/healthz and /ready", *self.address)

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await server.wait_closed()

    def answer(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        """The status and body for a request."""
        name, ready, tasks = self.state()
        body: dict[str, Any] = {"state": name, "ready": ready, "tasks": tasks}
        path = path.split("?", 1)[0]
        if path not in ("/healthz", "/ready"):
            return 404, {"error": f"no {path}: ask /healthz or /ready"}
        if method not in ("GET", "HEAD"):
            return 405, {"error": f"{method} {path}: use GET"}
        if path == "/ready" and not ready:
            return 503, body
        return 200, body

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_READ_SECONDS):
                head = await reader.readuntil(b"\r\n\r\n")
            method, path = (head[:_HEAD_BYTES].split(b"\r\n", 1)[0].decode("latin-1")
                            .split(" ") + ["", ""])[:2]
            status, body = self.answer(method, path)
            data = json.dumps(body).encode() + b"\n"
            writer.write(f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: "
                         f"application/json\r\nContent-Length: {len(data)}\r\nConnection: "
                         f"close\r\n\r\n".encode() + (b"" if method == "HEAD" else data))
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError):
            pass  # a client that sent no request, or went: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
