"""Metrics reporters, chosen by ``metrics.reporters`` (a comma-separated list):

- ``prometheus``: an HTTP endpoint, ``GET /metrics`` (``prometheus_client``'s text format) on
  ``metrics.reporter.prometheus.host``:``port`` (container ``i`` of a run of several on port
  + i), served from one thread of its own with its connections bounded as
  ``runtime.host.http_thread`` says (64 at once, 10 s each). Each metric is
  ``samza_<group>_<name>`` (``-`` as ``_``; counters end in ``_total``), labelled with job,
  container, and the sample's own task, operator, store, stream and partition. It reads the registry when scraped: nothing is done between scrapes.
- ``snapshot``: a record on the stream ``<job>-metrics`` of the job's default system every
  ``metrics.reporter.interval.ms``, as Samza's MetricsSnapshotReporter: JSON of
  ``runtime.host.metrics.snapshot_record`` (a header naming the job, the container and the time,
  and every metric with its labels), keyed by the container's name.
- ``json``: the same record in a file, rewritten whole (write and rename) every interval and
  at the end: ``metrics.reporter.json.path``, by default ``<job.dir>/metrics-<container>.json``.
- ``otel``: the same numbers through the OpenTelemetry SDK (the ``otel`` extra), sent over
  OTLP/HTTP to ``tracing.otlp.endpoint`` every interval (``runtime.host.tracing.OtelMetrics``).

Every reporter writes a last time when the job stops, so its numbers are the run's totals.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from runtime.host.http_thread import Reply, ThreadServer
from runtime.host.metrics import Metrics, Sample, snapshot_record
from samza_dsl.errors import ConfigError, SamzaError
from samza_dsl.jobconfig import JobConfig

__all__ = ["REPORTERS", "Reporters", "reporter_names", "prometheus_name", "job_reporters"]

REPORTERS = ("prometheus", "snapshot", "json", "otel")

#: metrics that go up and down (Prometheus gauges); every other runtime metric only grows
GAUGES = frozenset({"event-loop-utilization", "messages-in-flight", "checkpointed-offset",
                    "next-offset", "end-offset", "lag", "behind", "checkpoint-written-ms",
                    "last-commit-ms", "bytes"})

_log = logging.getLogger("samza_dsl.metrics")


def reporter_names(config: JobConfig) -> list[str]:
    """The reporters ``metrics.reporters`` names, checked."""
    raw = str(config.metrics.reporters or "")
    names = [n.strip() for n in raw.split(",") if n.strip()]
    for n in names:
        if n not in REPORTERS:
            raise ConfigError(f"metrics.reporters={raw!r}: no reporter {n!r}; choose among "
                              f"{', '.join(REPORTERS)} (comma-separated)")
    return names


def prometheus_name(group: str, name: str) -> str:
    return "samza_" + re.sub(r"[^a-zA-Z0-9_]", "_", f"{group}_{name}")


class _Collector:
    """A ``prometheus_client`` collector over the registry: families made when scraped."""

    def __init__(self, metrics: Metrics, labels: Mapping[str, str]) -> None:
        self.metrics = metrics
        self.labels = dict(labels)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        user_gauges = set(self.metrics.snapshot_gauges())
        families: dict[str, tuple[bool, str, str, list[tuple[dict[str, str], float]]]] = {}
        for group, name, labels, value in self.metrics.samples():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            gauge = name in user_gauges if group == "user" else name in GAUGES
            key = prometheus_name(group, name)
            fam = families.setdefault(key, (gauge, group, name, []))
            fam[3].append(({**self.labels, **labels}, float(value)))
        for key, (gauge, group, name, rows) in families.items():
            keys = sorted({k for labels, _ in rows for k in labels})
            doc = f"samza-dsl {group} metric {name}"
            family = GaugeMetricFamily(key, doc, labels=keys) if gauge else \
                CounterMetricFamily(key, doc, labels=keys)
            for labels, value in rows:
                family.add_metric([labels.get(k, "") for k in keys], value)
            yield family


class Reporters:
    """The reporters of one container: started with its loop, closed when it stops.

    Args:
        metrics: the container's registry.
        config: the job's config.
        header: the job's name and id, and the container's name, for every record.
        buffer: the ``<job>-metrics`` stream's buffer in the container's producer (the
            snapshot reporter); ``signal`` asks the producer to write it.
        job_dir: where the json reporter's file goes by default.
        container_index: moves the Prometheus port of container ``i`` of several to port + i.
    """

    def __init__(self, metrics: Metrics, config: JobConfig, header: Mapping[str, Any],
                 *, buffer: list[Any] | None = None, signal: Callable[[], None] | None = None,
                 job_dir: str | None = None, container_index: int = 0) -> None:
        self.metrics = metrics
        self.names = reporter_names(config)
        self.header = {**header, "reset-time": int(time.time() * 1000)}
        self.interval = int(config.metrics.reporter_interval_ms) / 1000.0
        self.buffer = buffer
        self.signal = signal
        path = config.metrics.json_path
        self.json_path = str(path) if path else os.path.join(
            job_dir or ".", f"metrics-{header.get('container-name', 'container')}.json")
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self.address: tuple[str, int] | None = None
        self._otel: Any = None
        if "otel" in self.names:
            from runtime.host.tracing import OtelMetrics

            user_gauges = metrics.snapshot_gauges
            self._otel = OtelMetrics(
                metrics.samples,
                lambda g, n: n in user_gauges() if g == "user" else n in GAUGES, config,
                {"job": str(header.get("job-name", "")),
                 "container": str(header.get("container-name", ""))},
                config.metrics.reporter_interval_ms)
        if "prometheus" in self.names:
            host = str(config.metrics.prometheus_host)
            port = int(config.metrics.prometheus_port)
            self._serve(host, port + container_index if port else 0)

    @property
    def periodic(self) -> bool:
        return "snapshot" in self.names or "json" in self.names or "otel" in self.names

    def _serve(self, host: str, port: int) -> None:
        from prometheus_client import CollectorRegistry

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self.metrics, {
            "job": str(self.header.get("job-name", "")),
            "container": str(self.header.get("container-name", ""))}))
        server = ThreadServer(_scrape(registry), name="samza-metrics")
        try:
            self.address = server.start(host, port)
        except OSError as e:
            raise SamzaError(f"metrics.reporters=prometheus: cannot listen on {host}:{port}: "
                             f"{e.strerror or e}; set metrics.reporter.prometheus.port to a "
                             f"free port (0 picks one)") from e
        self._server = server
        _log.info("metrics: Prometheus endpoint at http://%s:%d/metrics", *self.address)

    def start(self) -> None:
        """Start the periodic reports on the running loop."""
        if self.periodic:
            self._task = asyncio.get_running_loop().create_task(self._every())

    async def _every(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.report()
            except Exception as exc:  # a full disk must not stop the job: said, and retried
                _log.warning("metrics: a report failed: %s: %s", type(exc).__name__, exc)

    def record(self, samples: list[Sample] | None = None) -> dict[str, Any]:
        return snapshot_record(self.metrics.samples() if samples is None else samples,
                               {**self.header, "time": int(time.time() * 1000)})

    def report(self) -> None:
        """One report by every periodic reporter."""
        if not self.periodic:
            return
        if self._otel is not None:
            self._otel.refresh()
            if "snapshot" not in self.names and "json" not in self.names:
                return
        data = json.dumps(self.record(), separators=(",", ":")).encode()
        if "snapshot" in self.names and self.buffer is not None:
            key = str(self.header.get("container-name", "")).encode()
            self.buffer.append((key, data, None))
            if self.signal is not None:
                self.signal()
        if "json" in self.names:
            tmp = f"{self.json_path}.tmp"
            os.makedirs(os.path.dirname(os.path.abspath(self.json_path)), exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, self.json_path)

    async def close(self) -> None:
        """The last report (before the producer's last flush) and the end of the periodic one."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):
            self.report()
        if self._otel is not None:
            otel, self._otel = self._otel, None
            with contextlib.suppress(Exception):
                otel.close()

    def stop_server(self) -> None:
        """Stop the Prometheus endpoint (after the run: it serves the final numbers until
        then), without waiting for its thread."""
        server, self._server = self._server, None
        if server is not None:
            server.close(wait=0.0)


def _scrape(registry: Any) -> Callable[[str, str], Reply]:
    """The Prometheus endpoint's answer: the registry's text format at ``/metrics``."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    def reply(method: str, target: str) -> Reply:
        path = target.split("?", 1)[0]
        if path not in ("/metrics", "/"):
            return 404, "text/plain; charset=utf-8", f"no {path[:80]}: ask /metrics\n".encode()
        if method not in ("GET", "HEAD"):
            return 405, "text/plain; charset=utf-8", f"{method[:16]}: use GET\n".encode()
        return 200, CONTENT_TYPE_LATEST, generate_latest(registry)
    return reply


def job_reporters(metrics: Metrics, config: JobConfig, *, job_name: str, job_id: str,
                  container_id: int | None, producer: Any, job_dir: str | None,
                  create_stream: Callable[[str], None]) -> Reporters | None:
    """The reporters ``metrics.reporters`` names for one container of a job, or None. The
    snapshot reporter's stream is made (``create_stream``) and added to the producer."""
    from runtime.host.jobdir import metrics_stream

    names = reporter_names(config)
    if not names:
        return None
    buffer = None
    if "snapshot" in names:
        stream = metrics_stream(job_name)
        create_stream(stream)
        producer.add_stream(stream, stream, 1, None)
        buffer = producer.buffer(stream, 0)
    name = "container" if container_id is None else f"container-{container_id}"
    return Reporters(metrics, config, {"job-name": job_name, "job-id": job_id,
                                       "container-name": name, "source": "samza-dsl",
                                       "version": 1},
                     buffer=buffer, signal=producer.signal, job_dir=job_dir,
                     container_index=container_id or 0)
