"""The job page: a live view of a running job, served read-only over HTTP (aiohttp).

``samza-dsl run APP --ui [HOST:]PORT`` serves it next to the job, from the job's own metrics
registry (a run of several containers on the local system: from the snapshot stream they write); ``samza-dsl ui APP`` serves it for a job running elsewhere, from the job's snapshot
stream ``<job>-metrics`` in its local log, or from its Prometheus endpoint (``--from URL``).

The page (``runtime.ops.ui_page``) draws the plan's DAG (the drawing of ``samza-dsl plan
--format svg``, each stage labelled with what runs it: the local system or Kafka) and annotates
each operator with its rate, its own calls in flight (where it has some), its mean handle time
and its late drops; each input and intermediate stream with how far behind it is. Its headline
is how far behind the job is (end offset less the next offset to process, summed over the input
partitions) and its rate; the lag since the checkpoint (what ``samza-dsl status`` calls lag:
end offset less the offset after the checkpoint) is a secondary figure. Beside the drawing: a
row per input stream with a sparkline of the last five minutes and a heat strip of its
partitions, then the operators, streams, consumer group and containers (docs/operations.md).
What it shows comes from ``runtime.ops.ui_model.JobView``. The first answer carries the drawing
and the latest state, so the page is drawn with data at its first paint; it updates itself once
a second from server-sent events (``/events``); ``/api/state`` is the same state as JSON and
``/plan.svg`` the drawing; ``/query/<store>`` answers an interactive query of a job it runs
with ``query.enabled`` as the job's query endpoint does (docs/queries.md).

The server runs in a thread of its own with its own event loop, so serving never runs on the
job's loop; it takes one sample of the metrics a second whoever watches. Every route is a GET:
nothing on the page changes the job. It holds at most ``MAX_CONNECTIONS`` connections at once
(an open page holds one for its events; one more is answered 503 and closed), closes a
connection that has sent no whole request for ``IDLE_S`` seconds (since it was opened, or since
its last answer), and says a malformed request in one line at debug level, without a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

from runtime.host.metrics import Sample
from runtime.ops.ui_model import HISTORY_S, JobView, Snapshot, group_view
from runtime.ops.ui_page import page_html
from runtime.progress import stall_after, stall_lags, stall_text
from samza_dsl.errors import SamzaError

__all__ = ["JobView", "Snapshot", "group_view", "SnapshotSource", "RunnerSource", "StreamSource", "PrometheusSource",
           "ContainersSource", "UIServer",
           "parse_address", "HISTORY_S"]

_log = logging.getLogger("samza_dsl.ui")

#: seconds between two samples
INTERVAL_S = 1.0

#: the page's connections open at once, and how long one may stay without a whole request
MAX_CONNECTIONS = 64
IDLE_S = 10.0


def parse_address(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``PORT`` or ``HOST:PORT`` -> (host, port); the host is 127.0.0.1 unless given."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = default_host, text
    host = host.strip("[]") or default_host
    try:
        n = int(port)
    except ValueError:
        raise SamzaError(f"--ui takes PORT or HOST:PORT, got {text!r}") from None
    if not 0 <= n <= 65535:
        raise SamzaError(f"--ui: port {n} is not between 0 and 65535")
    return host, n


def runs_on(plan: Any) -> str:
    """What runs a job's stages, for its drawing's stage labels: the local system, Kafka (or
    memory, a job of a test's inputs)."""
    from types import SimpleNamespace

    from runtime.engine.systems import SYSTEMS, job_system

    # job_system reads an application's spec, which the plan holds
    kind = job_system(SimpleNamespace(spec=lambda: plan.app, name=plan.job_name))
    name = next((k for k, v in SYSTEMS.items() if v is kind), "")
    return {"local": "the local system", "kafka": "Kafka"}.get(name, name)


# -- sources ------------------------------------------------------------------------------------

class SnapshotSource(ABC):
    """Where the page's snapshots come from: ``poll()`` returns the new ones, ``containers()``
    the containers' states. What a source may tell besides, declared here with the defaults of
    one that tells nothing more: the consumer group of its container (``group``), why its last
    poll read nothing (``error``), and what it holds open (``close``)."""

    #: what the page says it reads from ("in-process", "stream", "containers", "prometheus")
    kind = ""
    #: why the last poll read nothing, for the page; None: it read
    error: str | None = None

    @abstractmethod
    def poll(self) -> list[Snapshot]:
        """The snapshots since the last poll."""

    @abstractmethod
    def containers(self) -> dict[str, str]:
        """Each container's state, by name."""

    def group(self) -> dict[str, Any] | None:
        """The consumer group of a container that is a member of one; None otherwise."""
        return None

    def close(self) -> None:
        """Closes what the source holds open (nothing by default)."""
        return None


class RunnerSource(SnapshotSource):
    """Snapshots of a job running in this process (``LocalRunner``): its registry, read from the
    page's thread (the collectors read numbers the runtime keeps; a dict that changes while it is
    read is read again)."""

    kind = "in-process"

    def __init__(self, runner: Any, container: str = "samza-container-0") -> None:
        self.runner = runner
        self.container = container

    def plan(self) -> Any:
        """The runner's plan once its container is built (the plan comes first); else None."""
        return self.runner.plan if self.runner.container is not None else None

    def poll(self) -> list[Snapshot]:
        if self.runner.container is None:
            return []
        for _ in range(5):
            try:
                samples = self.runner.metrics.samples()
                break
            except RuntimeError:  # a dict changed size while it was read: read again
                continue
        else:
            return []
        return [(self.container, int(time.time() * 1000), samples)]

    def containers(self) -> dict[str, str]:
        return {self.container: str(self.runner.status().get("state", "?"))}

    def group(self) -> dict[str, Any] | None:
        """The consumer group of a container that is a member of one (``job.coordinator=kafka``):
        its container's status's ``group`` (``runtime.kafka.tasks.GroupTasks.status``); None
        otherwise (a container's status has no group)."""
        container = self.runner.container
        if container is None or not self.runner.on_log:  # a job in memory has no group
            return None
        for _ in range(5):
            try:
                group: dict[str, Any] | None = container.status().get("group")
                return group
            except RuntimeError:  # a dict changed size while it was read: read again
                continue
        return None


def _record_snapshot(data: Any) -> Snapshot | None:
    """A snapshot record (``runtime.host.metrics.snapshot_record``) as a Snapshot; None if it is not
    one."""
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), list):
        return None
    header = data.get("header") or {}
    name = str(header.get("container-name", "container"))
    t = int(header.get("time", time.time() * 1000))
    samples: list[Sample] = []
    for m in data["metrics"]:
        if isinstance(m, dict) and "group" in m and "name" in m:
            samples.append((str(m["group"]), str(m["name"]),
                            {str(k): str(v) for k, v in (m.get("labels") or {}).items()},
                            m.get("value")))
    return name, t, samples


class StreamSource(SnapshotSource):
    """Snapshots from the job's snapshot stream ``<job>-metrics`` in its local log: each record's
    value is the JSON of a snapshot record, one per container and reporting interval. It starts
    with the records of the last ``HISTORY_S`` seconds (at most ``backlog`` per partition)."""

    kind = "stream"

    def __init__(self, log: Any, stream: str, backlog: int = 2000) -> None:
        self.log = log
        self.stream = stream
        self.backlog = backlog
        self.positions: dict[int, int] = {}
        self.seen: dict[str, float] = {}

    def poll(self) -> list[Snapshot]:
        n = self.log.partitions(self.stream) or 0
        out: list[Snapshot] = []
        for p in range(n):
            end = self.log.end_offset(self.stream, p)
            pos = self.positions.get(p)
            if pos is None:
                pos = max(self.log.start_offset(self.stream, p), end - self.backlog)
            while pos < end:
                first, records = self.log.read(self.stream, p, pos, 1024)
                if not records:
                    break
                for _, value, _ in records:
                    try:
                        snap = _record_snapshot(json.loads(value or b"null"))
                    except ValueError:
                        snap = None
                    if snap is not None:
                        out.append(snap)
                pos = first + len(records)
            self.positions[p] = pos
        out.sort(key=lambda s: s[1])
        cutoff = time.time() * 1000 - HISTORY_S * 1000
        out = [s for s in out if s[1] >= cutoff] or out[-1:]
        for name, t, _ in out:
            self.seen[name] = t / 1000
        return out

    def containers(self) -> dict[str, str]:
        now = time.time()
        return {name: f"reported {max(0.0, now - t):.0f} s ago" for name, t in self.seen.items()}


class ContainersSource(SnapshotSource):
    """Snapshots of a run of several container processes that this process started
    (``LocalRunner`` with ``job.container.count`` > 1 on the local system): the containers'
    snapshot stream in the job's local log (``StreamSource``), and each process's state from the
    runner. The log is opened once every container process is running."""

    kind = "containers"

    def __init__(self, runner: Any, open_job: Callable[[], Any],
                 interval_s: float = INTERVAL_S) -> None:
        self.runner = runner
        self.open_job = open_job  # the job's local log, opened read-only (a ``LocalJob``)
        self._job: Any = None
        self._stream: StreamSource | None = None
        #: each container's latest snapshot: (time in s, its samples)
        self.latest: dict[str, tuple[float, list[Sample]]] = {}
        self.stall_s = stall_after(interval_s)

    def poll(self) -> list[Snapshot]:
        if self._stream is None:
            if self.runner.status().get("state") != "running":
                return []
            self._job = self.open_job()
            self._stream = StreamSource(self._job.log_of(self._job.main_system),
                                        f"{self._job.job_name}-metrics")
        snaps = self._stream.poll()
        for name, t, samples in snaps:
            if name not in self.latest or self.latest[name][0] <= t / 1000:
                self.latest[name] = (t / 1000, samples)
        return snaps

    def containers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for i, proc in enumerate(self.runner.status().get("containers", [])):
            name = f"container-{i}"
            out[name] = f"running (pid {proc['pid']})" if proc["alive"] else \
                f"exited ({proc['exit_code']})"
            if proc["alive"]:
                out[name] = self._stalled(name, proc["pid"]) or out[name]
        return out

    def _stalled(self, name: str, pid: int) -> str | None:
        """``stalled ...`` for a container that has written no snapshot for ``stall_s`` while
        its partitions lag (their end offsets now, against its last snapshot's checkpoints)."""
        last = self.latest.get(name)
        job = self._job
        if last is None or job is None or time.time() - last[0] < self.stall_s:
            return None
        ends: dict[tuple[str, int], Any] = {}
        for group, metric, labels, value in last[1]:
            if group == "task" and metric in ("end-offset", "lag"):
                key = (labels.get("stream", ""), int(labels.get("partition", "0")))
                ends.setdefault(key, {})[metric] = value
        # the offset after the checkpoint: the end then, less the lag then
        positions = [[sid, p, v["end-offset"] - v["lag"]] for (sid, p), v in ends.items()
                     if "end-offset" in v and "lag" in v]

        def end_of(sid: str, p: int) -> int | None:
            if sid not in job.physical:
                return None
            return int(job.log_of(job.stream_system[sid]).end_offset(job.physical[sid], p))

        lags = stall_lags(positions, end_of)
        if not lags:
            return None
        return stall_text(name, pid, time.time() - last[0], lags)

    def close(self) -> None:
        if self._job is not None:
            self._job.close()
            self._job = None


_GROUPS = ("container", "task", "operator", "store", "producer", "user")


def _partition_label_ok(metric: str, labels: Mapping[str, str], warned: set[Any]) -> bool:
    """Whether a sample's ``partition`` label, if any, is a partition number; a sample with
    another is left out (a warning once per metric and label), not the whole scrape."""
    p = labels.get("partition")
    if p is None or (p.isascii() and p.isdigit()):
        return True
    if (metric, p) not in warned:
        warned.add((metric, p))
        _log.warning("job page: skipped the samples of %s with partition=%r: a partition label "
                     "must be a partition number; fix the exporter that writes it", metric, p)
    return False


def prometheus_samples(text: str, warned: set[Any] | None = None) -> list[Snapshot]:
    """Snapshots, one per container, from a Prometheus text exposition: ``samza_<group>_<name>``
    (``-`` as ``_``) with labels job, container, task, operator, stream, partition, store.
    ``warned``: the (metric, label) pairs already warned about."""
    from prometheus_client.parser import text_string_to_metric_families

    warned = set() if warned is None else warned
    by: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name = s.name
            if not name.startswith("samza_") or name.endswith("_created"):
                continue
            rest = name[len("samza_"):].removesuffix("_total")
            group, _, metric = rest.partition("_")
            if group not in _GROUPS or not metric:
                continue
            labels = dict(s.labels)
            if not _partition_label_ok(name, labels, warned):
                continue
            container = labels.pop("container", "container")
            labels.pop("job", None)
            by.setdefault(container, []).append((group, metric.replace("_", "-"), labels,
                                                 s.value))
    now = int(time.time() * 1000)
    return [(c, now, samples) for c, samples in by.items()]


class PrometheusSource(SnapshotSource):
    """Snapshots read from a Prometheus endpoint (``http://HOST:PORT/metrics``)."""

    kind = "prometheus"

    def __init__(self, url: str, timeout: float = 2.0) -> None:
        self.url = url
        self.timeout = timeout
        self.seen: dict[str, str] = {}
        self.error: str | None = None
        self._warned: set[Any] = set()

    def poll(self) -> list[Snapshot]:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as resp:  # noqa: S310
                text = resp.read().decode("utf-8", "replace")
        except OSError as exc:
            self.error = f"cannot read {self.url}: {exc}"
            self.seen = {k: "not answering" for k in self.seen}
            return []
        self.error = None
        snaps = prometheus_samples(text, self._warned)
        self.seen = {name: "up" for name, _, _ in snaps}
        return snaps

    def containers(self) -> dict[str, str]:
        return dict(self.seen)


# -- the server ---------------------------------------------------------------------------------

class UIServer:
    """The page's HTTP server, in a thread of its own with its own event loop.

    Args:
        source: where the snapshots come from (a ``SnapshotSource``: ``RunnerSource``,
            ``StreamSource``, ``ContainersSource``, ``PrometheusSource``): ``poll()`` returns the
            new ones, ``containers()`` their states.
        plan: the job's plan, or a function that returns it once known (None until then).
        job: the job's name, for the title.
        host, port: where to listen (port 0: any free one).
    """

    def __init__(self, source: SnapshotSource, plan: Any, job: str, host: str = "127.0.0.1",
                 port: int = 0, interval: float = INTERVAL_S) -> None:
        self.source = source
        self._plan: Callable[[], Any] = plan if callable(plan) else (lambda: plan)
        self.view = JobView(None, job)
        self.job = job
        self.host = host
        self.port = port
        self.interval = interval
        self.url = ""
        self._svg: str | None = None
        self._svg_error: str | None = None
        self._state: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._tick: asyncio.Condition | None = None

    # -- life ----------------------------------------------------------------------------------

    def start(self) -> str:
        """Start serving; returns the page's URL once it listens."""
        self._thread = threading.Thread(target=self._run, name="samza-ui", daemon=True)
        self._thread.start()
        self._started.wait(30)
        if self._error is not None:
            err = self._error
            raise SamzaError(f"cannot serve the job page on {self.host}:{self.port}: {err}") \
                from err
        return self.url

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)
        self.source.close()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
            self._started.set()

    async def _serve(self) -> None:
        from aiohttp import web

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._tick = asyncio.Condition()
        app = web.Application(middlewares=[self._host_check()])
        app.router.add_get("/", self._page)
        app.router.add_get("/events", self._events)
        app.router.add_get("/api/state", self._api_state)
        app.router.add_get("/plan.svg", self._plan_svg)
        app.router.add_get("/query/{store}", self._query)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0,
                               keepalive_timeout=IDLE_S, logger=_PageLog(_log, {}))
        await runner.setup()
        pages = runner.server
        assert pages is not None
        held: set[_Held] = set()

        def connection() -> asyncio.BaseProtocol:
            if len(held) >= MAX_CONNECTIONS:
                return _Refused()
            return _Held(pages(), held)
        server = None
        try:
            server = await self._loop.create_server(connection, self.host, self.port)
            sockets = getattr(server, "sockets", None) or []  # foreign: asyncio's Server
            port = sockets[0].getsockname()[1] if sockets else self.port
            host = f"[{self.host}]" if ":" in self.host else self.host
            self.url = f"http://{host}:{port}/"
            self.port = port
            await self._sample()
            self._started.set()
            sampler = asyncio.create_task(self._sampling())
            await self._stop.wait()
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            async with self._tick:
                self._tick.notify_all()
        finally:
            if server is not None:
                server.close()
            await runner.cleanup()

    async def _sampling(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self._sample()
            except Exception as exc:  # the page shows it, and keeps trying
                self._state = {**self._state, "error": f"{type(exc).__name__}: {exc}"}
            assert self._tick is not None
            async with self._tick:
                self._tick.notify_all()

    async def _sample(self) -> None:
        if self.view.plan is None:
            plan = self._plan()
            if plan is not None:
                self.view.plan = plan
        snaps = await asyncio.to_thread(self.source.poll)
        self.view.add(snaps)
        state = self.view.state(self.source.containers())
        state["group"] = group_view(self.source.group(), state["partitions"])
        state["source"] = self.source.kind
        state["plan_ready"] = self.view.plan is not None
        err = self.source.error
        if err:
            state["error"] = err
        self._state = state

    def allowed_hosts(self) -> set[str]:
        """The names the page is served as: a request for any other (a name an attacker's DNS
        points at 127.0.0.1, to read the page from a page of theirs) is refused."""
        names = {"127.0.0.1", "localhost", "::1", self.host.lower()}
        return {n for n in names if n and n not in ("0.0.0.0", "::")}

    @staticmethod
    def _host_name(header: str) -> str:
        """The host name of a ``Host`` header, without its port or an IPv6 address's brackets."""
        header = header.strip().lower()
        if header.startswith("["):
            return header[1:header.find("]")] if "]" in header else header
        return header.rpartition(":")[0] if header.count(":") == 1 else header

    def _host_check(self) -> Any:
        from aiohttp import web

        @web.middleware
        async def check_host(request: Any, handler: Any) -> Any:
            host = request.headers.get("Host", "")
            if self._host_name(host) not in self.allowed_hosts():
                return web.Response(
                    status=421, text=f"the job page answers only as "
                    f"{', '.join(sorted(self.allowed_hosts()))}, not as Host {host!r}: open it "
                    f"at {self.url or 'the address samza-dsl printed'}\n")
            return await handler(request)
        return check_host

    # -- routes (GET only: the page changes nothing) --------------------------------------------

    def _svg_text(self) -> str | None:
        if self._svg is None and self._svg_error is None and self.view.plan is not None:
            from planner.render import GraphvizMissing, plan_to_svg

            try:
                svg = plan_to_svg(self.view.plan, runs_on(self.view.plan))
                self._svg = svg[svg.find("<svg"):]
            except GraphvizMissing as exc:
                self._svg_error = str(exc)
        return self._svg

    async def _page(self, request: Any) -> Any:
        from aiohttp import web

        svg = await asyncio.to_thread(self._svg_text)
        return web.Response(text=page_html(self.job, self._state, svg, self._svg_error),
                            content_type="text/html", charset="utf-8")

    async def _api_state(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response(self._state, dumps=_dumps)

    async def _plan_svg(self, request: Any) -> Any:
        from aiohttp import web

        svg = await asyncio.to_thread(self._svg_text)
        if svg is None:
            return web.Response(status=503, text=self._svg_error or "the plan is not known yet")
        return web.Response(text=svg, content_type="image/svg+xml", charset="utf-8")

    async def _query(self, request: Any) -> Any:
        """An interactive query of the job in this process (``runtime.engine.query``), answered
        by its container's query endpoint as that endpoint answers it."""
        from aiohttp import web

        from runtime.engine.query import query_json

        container = self.source.runner.container if isinstance(self.source, RunnerSource) \
            else None
        endpoint = container.query if container is not None else None
        if endpoint is None:
            return web.json_response(
                {"error": "this page serves queries of a job it runs with query.enabled=true; "
                          "ask the job's own query endpoint (samza-dsl query)"}, status=404)
        headers = {k.lower(): v for k, v in request.headers.items()}
        status, body = await asyncio.to_thread(endpoint.handle, "GET", request.path_qs, headers)
        return web.Response(status=status, body=query_json(body) + b"\n",
                            content_type="application/json")

    async def _events(self, request: Any) -> Any:
        from aiohttp import web

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        assert self._tick is not None and self._stop is not None
        try:
            await resp.write(b"data: " + _dumps(self._state).encode() + b"\n\n")
            while not self._stop.is_set():
                async with self._tick:
                    await self._tick.wait()
                if self._stop.is_set():
                    break
                await resp.write(b"data: " + _dumps(self._state).encode() + b"\n\n")
        except (ConnectionError, asyncio.CancelledError):
            pass
        return resp


class _PageLog(logging.LoggerAdapter):
    """aiohttp's server log for the page: a request it could not handle (a malformed one, a
    client gone) is one line at debug level, without a traceback."""

    def _one_line(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        exc = kwargs.pop("exc_info", None)
        text = str(msg) % args if args else str(msg)
        if isinstance(exc, BaseException):
            text = f"{text}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        self.logger.log(level, "job page: %s", text)

    def exception(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self._one_line(logging.DEBUG, msg, *args, **kwargs)

    def error(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self._one_line(logging.DEBUG, msg, *args, **kwargs)

    def debug(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self._one_line(logging.DEBUG, msg, *args, **kwargs)


class _Held(asyncio.Protocol):
    """One of the page's connections, counted from its accept until it is lost (aiohttp's own
    count starts a loop turn later: a burst of connections would pass the bound)."""

    def __init__(self, inner: Any, held: set[_Held]) -> None:
        self.inner = inner
        self.held = held
        held.add(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.held.discard(self)
        self.inner.connection_lost(exc)


class _Refused(asyncio.Protocol):
    """A connection past ``MAX_CONNECTIONS``: answered 503 and closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        body = f"the job page holds {MAX_CONNECTIONS} connections already: try again\n".encode()
        assert isinstance(transport, asyncio.Transport)
        transport.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                        % (len(body), body))
        transport.close()


def _dumps(obj: Any) -> str:
    return json.dumps(obj, default=str, separators=(",", ":"))
