"""The job page: a live view of a running job, served read-only over HTTP (aiohttp).

``samza-dsl run APP --ui [HOST:]PORT`` serves it next to the job, from the job's own metrics
registry (a run of several containers on the local system: from the snapshot stream they write); ``samza-dsl ui APP`` serves it for a job running elsewhere, from the job's snapshot
stream ``<job>-metrics`` in its local log, or from its Prometheus endpoint (``--from URL``).

The page draws the plan's DAG (the drawing of ``samza-dsl plan --format svg``) and annotates each
operator with its rate, its own calls in flight (where it has some), its mean handle time and its
late drops; each input and intermediate stream with its lag. Below it: a lag chart per input
partition over the last five minutes, the checkpoint age and the containers. Lag is what
``samza-dsl status`` calls lag: end offset less the offset after the checkpoint; ``behind`` is
end offset less the next offset to process (docs/operations.md). It updates itself once a
second from server-sent events (``/events``); ``/api/state`` is the same state as JSON and
``/plan.svg`` the drawing.

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
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from runtime.host.metrics import Sample
from runtime.progress import stall_after, stall_lags, stall_text
from samza_dsl.errors import SamzaError

__all__ = ["JobView", "SnapshotSource", "RunnerSource", "StreamSource", "PrometheusSource",
           "ContainersSource", "UIServer",
           "parse_address", "HISTORY_S"]

_log = logging.getLogger("samza_dsl.ui")

#: how far back the lag charts go
HISTORY_S = 300.0
#: seconds between two samples
INTERVAL_S = 1.0

#: one container's snapshot: (container name, time in ms, samples)
Snapshot = tuple[str, int, list[Sample]]
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


def group_view(group: Mapping[str, Any] | None, partitions: list[dict[str, Any]]
               ) -> dict[str, Any] | None:
    """The page's consumer group section from a member's view of it: the generation, the last
    rebalance, every member (from the owners of the tasks) with its tasks, and each task's lag
    (the sum of its input partitions' lags on the page)."""
    if not group:
        return None
    lag = {(p["stream"], str(p["partition"])): p["lag"] for p in partitions
           if p.get("kind") == "input"}
    tasks = []
    members: dict[str, list[str]] = {}
    for task, parts in group.get("task_partitions", {}).items():
        owner = group.get("owners", {}).get(task)
        lags = [lag[(s, str(n))] for s, n in parts if (s, str(n)) in lag]
        tasks.append({"task": task, "member": owner, "lag": sum(lags) if lags else None})
        if owner is not None:
            members.setdefault(owner, []).append(task)
    return {"group": group.get("group"), "generation": group.get("generation"),
            "member": group.get("member"), "host": group.get("host"),
            "standby": group.get("standby", []), "restoring": group.get("restoring", []),
            "last_rebalance_at": group.get("last_rebalance_at"),
            "last_rebalance_s": group.get("last_rebalance_s"), "fenced": group.get("fenced", 0),
            "members": [{"member": m, "active": ts} for m, ts in sorted(members.items())],
            "tasks": tasks}


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
        if container is None or not self.runner.kafka:  # only a job on Kafka has a group
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


# -- the state the page shows -------------------------------------------------------------------

class _Prev:
    __slots__ = ("t", "n_in", "ns")

    def __init__(self, t: float, n_in: float, ns: float) -> None:
        self.t, self.n_in, self.ns = t, n_in, ns


class JobView:
    """What the page shows, from successive snapshots: per operator its rate (messages in per
    second), the messages in flight in its tasks, its mean handle time and late drops; per stream
    its lag; per input partition its lag over the last ``HISTORY_S`` seconds; the checkpoint age;
    the containers."""

    def __init__(self, plan: Any = None, job: str = "") -> None:
        self.plan = plan
        self.job = job
        #: the latest snapshot of each container
        self.latest: dict[str, tuple[int, list[Sample]]] = {}
        #: (container, operator, task) -> the one before, and the rates from it
        self._prev: dict[tuple[str, str, str], _Prev] = {}
        self._rate: dict[tuple[str, str, str], tuple[float, float | None]] = {}
        #: (stream, partition) -> (time s, lag)
        self.history: dict[tuple[str, str], deque[tuple[float, int]]] = {}
        self._proc_prev: dict[str, tuple[float, float]] = {}
        self._proc_rate: dict[str, float] = {}

    def add(self, snapshots: Iterable[Snapshot]) -> None:
        for name, t_ms, samples in snapshots:
            old = self.latest.get(name)
            if old is not None and old[0] >= t_ms:
                continue
            self.latest[name] = (t_ms, samples)
            self._take(name, t_ms / 1000.0, samples)

    def _take(self, container: str, t: float, samples: list[Sample]) -> None:
        meters: dict[tuple[str, str], dict[str, float]] = {}
        for group, name, labels, value in samples:
            if not isinstance(value, int | float):
                continue
            if group == "operator":
                key = (labels.get("operator", ""), labels.get("task", ""))
                meters.setdefault(key, {})[name] = value
            elif group == "task" and name == "lag":
                sp = (labels.get("stream", ""), labels.get("partition", ""))
                h = self.history.setdefault(sp, deque())
                h.append((t, int(value)))
                while h and h[0][0] < t - HISTORY_S:
                    h.popleft()
            elif group == "container" and name == "process-envelopes":
                prev = self._proc_prev.get(container)
                if prev is not None and t > prev[0]:
                    self._proc_rate[container] = max(0.0, (value - prev[1]) / (t - prev[0]))
                self._proc_prev[container] = (t, value)
        for (op, task), m in meters.items():
            mkey = (container, op, task)
            n_in, ns = m.get("messages-in", 0.0), m.get("handle-ns", 0.0)
            prev_m = self._prev.get(mkey)
            if prev_m is not None and t > prev_m.t:
                d_in = n_in - prev_m.n_in
                rate = max(0.0, d_in / (t - prev_m.t))
                handle = (ns - prev_m.ns) / d_in / 1000.0 if d_in > 0 else None
                self._rate[mkey] = (rate, handle)
            self._prev[mkey] = _Prev(t, n_in, ns)

    def state(self, containers: Mapping[str, str] | None = None, now: float | None = None
              ) -> dict[str, Any]:
        now = time.time() if now is None else now
        ops: dict[str, dict[str, Any]] = {}
        lag: dict[tuple[str, str], dict[str, Any]] = {}
        for _, samples in self.latest.values():
            for group, name, labels, value in samples:
                if not isinstance(value, int | float):
                    continue
                if group == "task" and name in ("lag", "behind", "next-offset", "end-offset",
                                                "checkpoint-written-ms"):
                    sp = (labels.get("stream", ""), labels.get("partition", ""))
                    lag.setdefault(sp, {})[name] = value
        for container, (_, samples) in self.latest.items():
            for group, name, labels, value in samples:
                if group != "operator" or not isinstance(value, int | float):
                    continue
                op, task = labels.get("operator", ""), labels.get("task", "")
                o = ops.setdefault(op, {"in": 0, "out": 0, "late": 0, "handle_ns": 0,
                                        "rate": 0.0, "in_flight": 0, "_h": [0.0, 0.0]})
                if name == "messages-in":
                    o["in"] += value
                    rate, handle = self._rate.get((container, op, task), (0.0, None))
                    o["rate"] += rate
                    if handle is not None:
                        o["_h"][0] += handle * rate
                        o["_h"][1] += rate
                elif name == "messages-in-flight":
                    o["in_flight"] += value
                elif name == "messages-out":
                    o["out"] += value
                elif name == "late-messages-dropped":
                    o["late"] += value
                elif name == "handle-ns":
                    o["handle_ns"] += value
        for o in ops.values():
            h = o.pop("_h")
            if h[1] > 0:
                o["handle_us"] = h[0] / h[1]
            else:  # nothing came in lately: the mean over the run
                o["handle_us"] = o["handle_ns"] / o["in"] / 1000.0 if o["in"] else None
            o["rate"] = round(o["rate"], 1)
        streams: dict[str, dict[str, Any]] = {}
        kinds = {}
        if self.plan is not None:
            kinds = {sid: s.kind for sid, s in self.plan.streams.items()}
        for (sid, _p), v in lag.items():
            s = streams.setdefault(sid, {"lag": 0, "behind": 0, "kind": kinds.get(sid, "input"),
                                         "partitions": 0})
            s["lag"] += int(v.get("lag", 0))
            s["behind"] += int(v.get("behind", 0))
            s["partitions"] += 1
        partitions = []
        ages = []
        for (sid, p), v in sorted(lag.items(), key=lambda kv: (kv[0][0], int(kv[0][1] or 0))):
            # the age of the checkpoint as ``samza-dsl status`` gives it: since it was written
            written = v.get("checkpoint-written-ms")
            age = None if written is None else round(max(0.0, now - written / 1000.0), 1)
            if age is not None:
                ages.append(age)
            hist = self.history.get((sid, p), deque())
            partitions.append({"stream": sid, "partition": p, "kind": kinds.get(sid, "input"),
                               "lag": int(v.get("lag", 0)), "behind": int(v.get("behind", 0)),
                               "checkpoint_age_s": age,
                               "history": [[round(t - now, 1), n] for t, n in hist]})
        conts = []
        given = dict(containers or {})
        for name in sorted(set(self.latest) | set(given)):
            t_ms, samples = self.latest.get(name, (0, []))
            values = {n: v for g, n, labels, v in samples if g == "container"}
            commit = values.get("last-commit-ms")
            conts.append({"name": name, "state": given.get(name, ""),
                          "processed": values.get("process-envelopes"),
                          "rate": round(self._proc_rate.get(name, 0.0), 1),
                          "commits": values.get("commit-calls"),
                          "last_commit_s": (round(max(0.0, now - commit / 1000.0), 1)
                                            if isinstance(commit, int | float) else None),
                          "utilization": values.get("event-loop-utilization"),
                          "reported_s": round(now - t_ms / 1000.0, 1) if t_ms else None})
        return {"job": self.job, "time": int(now * 1000),
                "operators": ops, "streams": streams, "partitions": partitions,
                "checkpoint_age_s": max(ages) if ages else None, "containers": conts,
                "intermediate_edges": self.intermediate_edges(),
                "input_nodes": {sid: f"stream:{sid}" for sid, k in kinds.items()
                                if k == "input"}}

    def intermediate_edges(self) -> dict[str, str]:
        """``"producer->consumer"`` (an edge's title in the SVG) -> its intermediate stream."""
        if self.plan is None:
            return {}
        from samza_dsl.spec import node_stream_id

        out: dict[str, str] = {}
        inter = self.plan.intermediate_streams
        g = self.plan.graph
        for u, v in g.edges:
            sid = node_stream_id(v)
            if sid is not None and sid in inter:
                for consumer in self.plan.next_ops(v):
                    out[f"{u}->{consumer}"] = sid
        return out


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
                svg = plan_to_svg(self.view.plan)
                self._svg = svg[svg.find("<svg"):]
            except GraphvizMissing as exc:
                self._svg_error = str(exc)
        return self._svg

    async def _page(self, request: Any) -> Any:
        from aiohttp import web

        return web.Response(text=_PAGE.replace("__JOB__", _esc(self.job)),
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


def _esc(text: str) -> str:
    import html

    return html.escape(text, quote=True)


_PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__JOB__ · samza-dsl</title>
<style>
:root{--fg:#1f2328;--mute:#59636e;--line:#d1d9e0;--bg:#f6f8fa;--accent:#0969da;--warn:#bc4c00}
*{box-sizing:border-box}
body{margin:0;font:13px/1.4 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;
 color:var(--fg);background:#fff}
header{display:flex;gap:24px;align-items:baseline;padding:10px 18px;border-bottom:1px solid var(--line);
 background:var(--bg)}
header h1{font-size:16px;margin:0}
header .kv{color:var(--mute)} header .kv b{color:var(--fg);font-variant-numeric:tabular-nums}
#live{width:8px;height:8px;border-radius:50%;background:#aaa;display:inline-block;margin-right:6px}
#live.on{background:#1a7f37}
main{display:grid;grid-template-columns:minmax(420px,1.1fr) minmax(380px,1fr);gap:18px;padding:14px 18px}
section h2{font-size:13px;margin:0 0 6px;color:var(--mute);text-transform:uppercase;letter-spacing:.04em}
#dag svg{width:100%;height:auto;max-height:86vh}
#dag .live rect{fill:#fff;fill-opacity:.92;stroke:#0969da;stroke-width:.6}
#dag .live text{font:8.5px system-ui,Helvetica,sans-serif;fill:#0550ae;font-variant-numeric:tabular-nums}
#dag .live.late text.l{fill:var(--warn);font-weight:600}
#dag .lag text{fill:#8250df;font-weight:600}
#dag .lag rect{stroke:#8250df}
table{border-collapse:collapse;width:100%;margin-bottom:14px;font-variant-numeric:tabular-nums}
th,td{padding:3px 8px;border-bottom:1px solid var(--line);text-align:right;white-space:nowrap}
th{color:var(--mute);font-weight:500}
th:first-child,td:first-child{text-align:left;white-space:normal;word-break:break-all}
#charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(220px,1fr));gap:10px;margin-bottom:14px}
.chart{border:1px solid var(--line);border-radius:6px;padding:6px 8px}
.chart .t{display:flex;justify-content:space-between;font-size:12px}
.chart .t b{font-variant-numeric:tabular-nums}
.chart svg{width:100%;height:60px;display:block}
#err{color:#cf222e}
.mute{color:var(--mute)}
</style></head><body>
<header><h1><span id="live"></span>__JOB__</h1>
<span class="kv">source <b id="source">–</b></span>
<span class="kv">containers <b id="ncont">–</b></span>
<span class="kv">rate <b id="rate">–</b></span>
<span class="kv">checkpoint age <b id="cpage">–</b></span>
<span class="kv">updated <b id="updated">–</b></span>
<span id="err"></span></header>
<main>
<section><h2>Plan</h2><div id="dag" class="mute">waiting for the plan…</div></section>
<section>
<h2>Lag per input partition (end − checkpoint, last 5 minutes)</h2><div id="charts" class="mute">–</div>
<div id="group" hidden><h2>Consumer group <span id="gsum" class="mute"></span></h2>
<table id="gmembers"><thead><tr><th>member</th><th>active tasks</th></tr></thead><tbody></tbody></table>
<table id="gtasks"><thead><tr><th>task</th><th>member</th><th title="end offset − checkpointed offset, over its input partitions; the tasks of other members show their lag on their own pages and in samza-dsl status">lag</th></tr></thead><tbody></tbody></table></div>
<h2>Operators</h2>
<table id="ops"><thead><tr><th>operator</th><th>msg/s</th><th>in</th><th>out</th>
<th>in flight</th><th>handle µs</th><th>late</th></tr></thead><tbody></tbody></table>
<h2>Streams</h2>
<table id="streams"><thead><tr><th>stream</th><th>kind</th><th>partitions</th>
<th title="end offset − checkpointed offset">lag</th>
<th title="end offset − next offset to process">behind</th></tr>
</thead><tbody></tbody></table>
<h2>Containers</h2>
<table id="conts"><thead><tr><th>container</th><th>state</th><th>msg/s</th><th>processed</th>
<th>commits</th><th>last commit</th><th>loop busy</th></tr></thead><tbody></tbody></table>
</section></main>
<script>
"use strict";
const NS="http://www.w3.org/2000/svg";
let svgReady=false, fetching=false;
function fmt(n){if(n===null||n===undefined)return "–";n=Number(n);
 const a=Math.abs(n);if(a>=1e9)return (n/1e9).toFixed(1)+"G";if(a>=1e6)return (n/1e6).toFixed(1)+"M";
 if(a>=1e4)return (n/1e3).toFixed(1)+"k";if(Number.isInteger(n))return String(n);
 return a>=100?n.toFixed(0):n.toFixed(1)}
function secs(s){if(s===null||s===undefined)return "–";return s<60?s.toFixed(0)+" s":(s/60).toFixed(1)+" min"}
function esc(s){return String(s).replace(/[&<>"]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]))}
function el(tag,attrs){const e=document.createElementNS(NS,tag);for(const k in attrs)e.setAttribute(k,attrs[k]);return e}
function badge(parent,key,x,y,lines,cls){
 let g=parent.querySelector('g.live[data-k="'+CSS.escape(key)+'"]');
 if(!g){g=el("g",{"class":"live "+(cls||""),"data-k":key});parent.appendChild(g);
  g.appendChild(el("rect",{rx:2,ry:2}));}
 g.querySelectorAll("text").forEach(t=>t.remove());
 let w=0;lines.forEach((ln,i)=>{const t=el("text",{x:x+3,y:y+9+i*10});t.textContent=ln[0];
  if(ln[1])t.setAttribute("class",ln[1]);g.appendChild(t);w=Math.max(w,t.getComputedTextLength())});
 // a badge at the drawing's right edge moves left, into the drawing, rather than be cut
 const vb=parent.ownerSVGElement&&parent.ownerSVGElement.viewBox.baseVal;
 if(vb&&vb.width&&x+w+6>vb.width-8){const dx=vb.width-8-w-6-x;x+=dx;
  g.querySelectorAll("text").forEach(t=>t.setAttribute("x",Number(t.getAttribute("x"))+dx))}
 const r=g.querySelector("rect");r.setAttribute("x",x);r.setAttribute("y",y);
 r.setAttribute("width",w+6);r.setAttribute("height",lines.length*10+3);
 g.classList.toggle("late",lines.some(l=>l[1]==="l"));return g}
function titleOf(g){const t=g.querySelector("title");return t?t.textContent:""}
function annotate(s){
 const root=document.querySelector("#dag svg g.graph");if(!root)return;
 for(const [op,o] of Object.entries(s.operators||{})){
  const node=document.getElementById(op);if(!node)continue;const b=node.getBBox();
  const lines=[[fmt(o.rate)+"/s · "+(o.in_flight?fmt(o.in_flight)+" in flight · ":"")+(o.handle_us==null?"–":fmt(o.handle_us))+" µs"]];
  if(o.late)lines.push(["late dropped "+fmt(o.late),"l"]);
  const g=badge(root,op,b.x+b.width-4,b.y+b.height-4,lines);g.dataset.op=op}
 const edges={};root.querySelectorAll("g.edge").forEach(e=>{edges[titleOf(e)]=e});
 const streams=s.streams||{};
 for(const [title,sid] of Object.entries(s.intermediate_edges||{})){
  const e=edges[title];if(!e||!streams[sid])continue;const texts=e.querySelectorAll("text");
  if(!texts.length)continue;const b=texts[texts.length-1].getBBox();
  badge(root,"lag:"+title,b.x+b.width+3,b.y-2,[["lag "+fmt(streams[sid].lag)]],"lag").dataset.stream=sid}
 const nodes={};root.querySelectorAll("g.node").forEach(n=>{nodes[titleOf(n)]=n});
 for(const [sid,title] of Object.entries(s.input_nodes||{})){
  const n=nodes[title];if(!n||!streams[sid])continue;const b=n.getBBox();
  badge(root,"lag:"+sid,b.x+b.width+2,b.y+b.height/2-6,[["lag "+fmt(streams[sid].lag)]],"lag").dataset.stream=sid}}
function chart(p){
 const W=220,H=60,h=p.history||[];const max=Math.max(1,...h.map(x=>x[1]));
 // the last 5 minutes, or since the page began to watch (at least one minute)
 const span=Math.min(300,Math.max(60,...h.map(x=>-x[0])));
 const pts=h.map(x=>[(W*(1+x[0]/span)).toFixed(1),(H-2-(H-6)*x[1]/max).toFixed(1)]);
 const line=pts.map(q=>q.join(",")).join(" ");
 const area=pts.length?("M"+pts[0][0]+","+(H-1)+" L"+line.replace(/ /g," L")+" L"+pts[pts.length-1][0]+","+(H-1)+"Z"):"";
 return '<div class="chart" data-sp="'+esc(p.stream+"/"+p.partition)+'"><div class="t"><span>'+esc(p.stream)+
  ' <span class="mute">p'+esc(p.partition)+'</span></span><b class="lagv">'+fmt(p.lag)+'</b></div>'+
  '<svg viewBox="0 0 '+W+' '+H+'" preserveAspectRatio="none">'+
  '<line x1="0" y1="'+(H-1)+'" x2="'+W+'" y2="'+(H-1)+'" stroke="#d1d9e0"/>'+
  (area?'<path d="'+area+'" fill="#8250df" fill-opacity=".12"/><polyline points="'+line+'" fill="none" stroke="#8250df" stroke-width="1.5" vector-effect="non-scaling-stroke"/>':'')+
  '<text x="2" y="10" font-size="9" fill="#59636e">'+fmt(max)+'</text></svg>'+
  '<div class="t mute"><span>-'+secs(span)+'</span><span>now</span></div>'+
  '<div class="t mute"><span class="behindv">behind '+fmt(p.behind)+'</span><span class="cpage">checkpoint age '+secs(p.checkpoint_age_s)+'</span></div></div>'}
function rows(id,html){document.querySelector("#"+id+" tbody").innerHTML=html}
function render(s){
 document.getElementById("live").classList.add("on");
 document.getElementById("source").textContent=s.source||"–";
 document.getElementById("ncont").textContent=(s.containers||[]).length;
 document.getElementById("rate").textContent=fmt((s.containers||[]).reduce((a,c)=>a+(c.rate||0),0))+" msg/s";
 document.getElementById("cpage").textContent=secs(s.checkpoint_age_s);
 document.getElementById("updated").textContent=new Date(s.time).toLocaleTimeString();
 document.getElementById("err").textContent=s.error||"";
 if(s.plan_ready&&!svgReady&&!fetching){fetching=true;fetch("plan.svg").then(r=>r.ok?r.text():Promise.reject(r.statusText))
  .then(t=>{const d=document.getElementById("dag");d.classList.remove("mute");d.innerHTML=t;svgReady=true;annotate(s)})
  .catch(e=>{document.getElementById("dag").textContent="no drawing: "+e}).finally(()=>{fetching=false})}
 if(svgReady)annotate(s);
 const inputs=(s.partitions||[]).filter(p=>p.kind==="input");
 const c=document.getElementById("charts");c.classList.toggle("mute",!inputs.length);
 c.innerHTML=inputs.length?inputs.map(chart).join(""):"no input partitions reported yet";
 rows("ops",Object.entries(s.operators||{}).map(([op,o])=>'<tr data-op="'+esc(op)+'"><td>'+esc(op)+'</td><td class="rate">'+fmt(o.rate)+
  '</td><td>'+fmt(o.in)+'</td><td>'+fmt(o.out)+'</td><td>'+fmt(o.in_flight)+'</td><td>'+(o.handle_us==null?"–":fmt(o.handle_us))+
  '</td><td>'+fmt(o.late)+'</td></tr>').join(""));
 rows("streams",Object.entries(s.streams||{}).map(([sid,v])=>'<tr data-stream="'+esc(sid)+'"><td>'+esc(sid)+'</td><td>'+esc(v.kind)+
  '</td><td>'+v.partitions+'</td><td class="lag">'+fmt(v.lag)+'</td><td class="behind">'+fmt(v.behind)+'</td></tr>').join(""));
 rows("conts",(s.containers||[]).map(c=>'<tr><td>'+esc(c.name)+'</td><td>'+esc(c.state||"")+'</td><td>'+fmt(c.rate)+'</td><td>'+fmt(c.processed)+
  '</td><td>'+fmt(c.commits)+'</td><td>'+(c.last_commit_s==null?"–":secs(c.last_commit_s)+" ago")+'</td><td>'+
  (c.utilization==null?"–":(100*c.utilization).toFixed(0)+"%")+'</td></tr>').join(""));
 const g=s.group;document.getElementById("group").hidden=!g;
 if(g){document.getElementById("gsum").textContent="generation "+g.generation+" · this page: "+g.member+" on "+g.host+
  (g.standby.length?" · standby "+g.standby.join(", "):"")+(g.restoring.length?" · restoring "+g.restoring.join(", "):"")+
  " · last rebalance "+(g.last_rebalance_at==null?"–":secs(Math.max(0,s.time/1000-g.last_rebalance_at))+" ago, took "+(g.last_rebalance_s==null?"–":g.last_rebalance_s.toFixed(2)+" s"));
  rows("gmembers",g.members.map(m=>'<tr><td>'+esc(m.member)+'</td><td>'+esc(m.active.join(", "))+'</td></tr>').join(""));
  rows("gtasks",g.tasks.map(t=>'<tr data-task="'+esc(t.task)+'"><td>'+esc(t.task)+'</td><td>'+esc(t.member||"–")+'</td><td class="lag">'+(t.lag==null?"–":fmt(t.lag))+'</td></tr>').join(""))}
 window.__updates=(window.__updates||0)+1}
const es=new EventSource("events");
es.onmessage=ev=>{try{render(JSON.parse(ev.data))}catch(e){document.getElementById("err").textContent=String(e)}};
es.onerror=()=>{document.getElementById("live").classList.remove("on")};
</script></body></html>
"""
