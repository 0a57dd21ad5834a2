"""A container's health endpoint, for a supervisor's probes (Kubernetes' liveness and readiness).

With ``job.health.port`` set (0 picks a free port), each container serves, on
``job.health.host`` (default 127.0.0.1):

- ``GET /healthz``: 200 while the container's event loop makes progress, 503 once it has made
  none for ``job.health.liveness.ms`` (30 s): no turn of the loop (a beat it takes every
  ``BEAT_S``) and no message processed. The answer comes from a thread of its own
  (``runtime.host.http_thread``), within milliseconds however busy the loop is with the job's
  functions; a loop blocked for good (a function that never returns) fails it after the
  threshold, and a frozen process (SIGSTOP) does not answer at all, so the probe times out.
- ``GET /ready``: 200 once the container's tasks are assigned and their stores restored, 503
  before that, while it stops, and in a consumer group from the moment a rebalance starts or
  the member loses its lease (fenced) until its tasks are assigned and restored again.

Both answer a small JSON object: ``{"state": "starting" | "restoring" | "running" |
"rebalancing" | "fenced" | "stopping" | "stopped", "ready": bool, "tasks": N,
"progress_s": S}`` (S: seconds since the loop last made progress). Container ``i`` of a run of
several on one host (``--containers N``) serves on port + i, as the Prometheus endpoint does.
The endpoint's connections are bounded as ``runtime.host.http_thread`` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from runtime.host.http_thread import Reply, ThreadServer
from samza_dsl.errors import SamzaError
from samza_dsl.jobconfig import JobConfig

__all__ = ["BEAT_S", "HealthServer", "health_address"]

_log = logging.getLogger("samza_dsl.health")

#: the loop's beat: it shows a loop that turns while no message comes
BEAT_S = 0.5


def health_address(config: JobConfig, container_index: int = 0
                   ) -> tuple[str, int] | None:
    """Where a container serves its health endpoint (``job.health.host``/``port``), or None
    when ``job.health.port`` is unset (-1)."""
    port = int(config.health.port)
    if port < 0:
        return None
    host = str(config.health.host)
    return host, port + container_index if port else 0


class HealthServer:
    """Answers ``/healthz`` and ``/ready`` from ``state()`` and the loop's progress, on a
    thread of its own.

    Args:
        state: the container's state now: ``(name, ready, tasks)`` (read from the server's
            thread: it only reads attributes).
        progress: a number that grows as the container processes messages (read from the
            server's thread), beside the loop's own beat.
        liveness_s: how long without progress ``/healthz`` still answers 200.
    """

    def __init__(self, state: Callable[[], tuple[str, bool, int]],
                 progress: Callable[[], int] | None = None, liveness_s: float = 30.0) -> None:
        self.state = state
        self.progress = progress
        self.liveness_s = liveness_s
        self.address: tuple[str, int] | None = None
        self.beats = 0
        self._seen = -1
        self._moved = time.monotonic()
        self._http: ThreadServer | None = None
        self._beat: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> None:
        """Serve (from a thread), and beat on the running loop."""
        http = ThreadServer(self._reply, name="samza-health", tick=self.look)
        try:
            self.address = http.start(host, port)
        except OSError as exc:
            raise SamzaError(f"job.health.port: cannot listen on {host}:{port}: "
                             f"{exc.strerror or exc}; set job.health.port to a free port (0 "
                             f"picks one) or -1 for no health endpoint") from None
        self._http = http
        self._beat = asyncio.create_task(self._beating(), name="health-beat")
        _log.info("health endpoint at http://%s:%d/healthz and /ready", *self.address)

    async def close(self) -> None:
        beat, self._beat = self._beat, None
        if beat is not None:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
        http, self._http = self._http, None
        if http is not None:
            await asyncio.to_thread(http.close)

    async def _beating(self) -> None:
        while True:
            self.beats += 1
            await asyncio.sleep(BEAT_S)

    def look(self) -> None:
        """Note whether the loop made progress since the last look (the server's thread looks
        every quarter second)."""
        seen = self.beats + (self.progress() if self.progress is not None else 0)
        if seen != self._seen:
            self._seen = seen
            self._moved = time.monotonic()

    def stalled_s(self) -> float:
        """Seconds since the loop last made progress, as of the last look."""
        return max(0.0, time.monotonic() - self._moved)

    def answer(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        """The status and body for a request."""
        name, ready, tasks = self.state()
        stalled = self.stalled_s()
        body: dict[str, Any] = {"state": name, "ready": ready, "tasks": tasks,
                                "progress_s": round(stalled, 3)}
        path = path.split("?", 1)[0]
        if path not in ("/healthz", "/ready"):
            return 404, {"error": f"no {path}: ask /healthz or /ready"}
        if method not in ("GET", "HEAD"):
            return 405, {"error": f"{method} {path}: use GET"}
        if path == "/healthz" and stalled > self.liveness_s:
            body["error"] = (f"the container's event loop made no progress for {stalled:.1f} s "
                             f"(job.health.liveness.ms={int(self.liveness_s * 1000)}): a "
                             f"function of the job blocks it; restart the container, and see "
                             f"what blocks with py-spy dump --pid PID")
            return 503, body
        if path == "/ready" and not ready:
            return 503, body
        return 200, body

    def _reply(self, method: str, path: str) -> Reply:
        status, body = self.answer(method, path)
        return status, "application/json", json.dumps(body).encode() + b"\n"
