"""What the job page shows (``runtime.ops.ui``), from the snapshots of a job's containers: the
model apart from the server that serves it.

The headline is how far behind the job is, ``behind``: over its input partitions, the end offset
less the next offset to process, summed; and its rate, the input offsets it processes a second
over about the last two seconds (the messages its containers process a second, for a source
that reports no input partitions). The lag since the checkpoint (end offset less the offset after the checkpoint, what
``samza-dsl status`` calls lag: what a restart now would read again) is a secondary figure: it
climbs between two commits while the job keeps up. Per stream: both, the end offsets, the rate
at which its next offsets move, both totals over the last ``HISTORY_S`` seconds, and each
partition's numbers.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from runtime.host.metrics import Sample

__all__ = ["JobView", "group_view", "HISTORY_S", "Snapshot"]

#: how far back the charts go
HISTORY_S = 300.0

#: one container's snapshot: (container name, time in ms, samples)
Snapshot = tuple[str, int, list[Sample]]

#: a partition's numbers in a snapshot
_PART_METRICS = ("lag", "behind", "next-offset", "end-offset", "checkpoint-written-ms")


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


# -- the state the page shows -------------------------------------------------------------------

class _Prev:
    __slots__ = ("t", "n_in", "ns")

    def __init__(self, t: float, n_in: float, ns: float) -> None:
        self.t, self.n_in, self.ns = t, n_in, ns


class JobView:
    """What the page shows, from successive snapshots: per operator its rate (messages in per
    second), the messages in flight in its tasks, its mean handle time and late drops; per stream
    how far behind it is, its lag since the checkpoint, its end offsets and rate, with their
    totals over the last ``HISTORY_S`` seconds; per input partition the same numbers now; the
    headline (over the input streams); the checkpoint age; the containers."""

    def __init__(self, plan: Any = None, job: str = "") -> None:
        self.plan = plan
        self.job = job
        #: the latest snapshot of each container
        self.latest: dict[str, tuple[int, list[Sample]]] = {}
        #: (container, operator, task) -> the one before, and the rates from it
        self._prev: dict[tuple[str, str, str], _Prev] = {}
        self._rate: dict[tuple[str, str, str], tuple[float, float | None]] = {}
        #: stream -> (time s, behind, lag, next offsets summed) after each snapshot
        self.history: dict[str, deque[tuple[float, int, int, int]]] = {}
        #: the input streams' totals: (time s, behind, lag)
        self.total: deque[tuple[float, int, int]] = deque()
        self._proc_prev: dict[str, tuple[float, float]] = {}
        self._proc_rate: dict[str, float] = {}

    def kinds(self) -> dict[str, str]:
        """Each stream's kind in the plan (input, intermediate, output); none without one."""
        if self.plan is None:
            return {}
        return {sid: s.kind for sid, s in self.plan.streams.items()}

    def partition_counts(self) -> dict[str, int]:
        """Each stream's partitions in the plan, where the plan knows them."""
        if self.plan is None:
            return {}
        return {sid: s.partitions for sid, s in self.plan.streams.items()
                if s.partitions is not None}

    def add(self, snapshots: Iterable[Snapshot]) -> None:
        for name, t_ms, samples in snapshots:
            old = self.latest.get(name)
            if old is not None and old[0] >= t_ms:
                continue
            self.latest[name] = (t_ms, samples)
            self._take(name, t_ms / 1000.0, samples)

    def _take(self, container: str, t: float, samples: list[Sample]) -> None:
        meters: dict[tuple[str, str], dict[str, float]] = {}
        parts: dict[tuple[str, str], dict[str, float]] = {}
        for group, name, labels, value in samples:
            if not isinstance(value, int | float):
                continue
            if group == "operator":
                key = (labels.get("operator", ""), labels.get("task", ""))
                meters.setdefault(key, {})[name] = value
            elif group == "task" and name in _PART_METRICS:
                sp = (labels.get("stream", ""), labels.get("partition", ""))
                parts.setdefault(sp, {})[name] = value
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
        if parts:
            self._history(t, {sid for sid, _ in parts})

    def partitions_now(self) -> dict[tuple[str, str], dict[str, float]]:
        """(stream, partition) -> its numbers (``_PART_METRICS``) in the containers' latest
        snapshots."""
        out: dict[tuple[str, str], dict[str, float]] = {}
        for _, samples in self.latest.values():
            for group, name, labels, value in samples:
                if group == "task" and name in _PART_METRICS and isinstance(value, int | float):
                    sp = (labels.get("stream", ""), labels.get("partition", ""))
                    out.setdefault(sp, {})[name] = value
        return out

    def _history(self, t: float, touched: set[str]) -> None:
        """Adds the totals of each stream a snapshot reported, and of the inputs, to their
        histories."""
        totals: dict[str, list[int]] = {}
        for (sid, _p), v in self.partitions_now().items():
            tot = totals.setdefault(sid, [0, 0, 0])
            tot[0] += int(v.get("behind", 0))
            tot[1] += int(v.get("lag", 0))
            tot[2] += int(v.get("next-offset", 0))
        kinds = self.kinds()
        behind = lag = 0
        for sid in touched & set(totals):
            h = self.history.setdefault(sid, deque())
            h.append((t, *totals[sid]))  # type: ignore[arg-type]
            _trim(h, t)
        for sid, tot in totals.items():
            if kinds.get(sid, "input") == "input":
                behind += tot[0]
                lag += tot[1]
        self.total.append((t, behind, lag))
        _trim(self.total, t)

    def state(self, containers: Mapping[str, str] | None = None, now: float | None = None
              ) -> dict[str, Any]:
        now = time.time() if now is None else now
        ops: dict[str, dict[str, Any]] = {}
        lag = self.partitions_now()
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
        kinds = self.kinds()
        streams: dict[str, dict[str, Any]] = {}
        for (sid, _p), v in lag.items():
            s = streams.setdefault(sid, {"lag": 0, "behind": 0, "end": 0,
                                         "kind": kinds.get(sid, "input"), "partitions": 0})
            s["lag"] += int(v.get("lag", 0))
            s["behind"] += int(v.get("behind", 0))
            s["end"] += int(v.get("end-offset", 0))
            s["partitions"] += 1
        counts = self.partition_counts()
        for sid, s in streams.items():
            # a member of a group reads some partitions of a stream: "2 of 4" on the page
            s["of"] = counts.get(sid)
            hist = self.history.get(sid, deque())
            s["rate"] = _rate_of(hist)
            s["history"] = [[round(t - now, 1), b, n] for t, b, n, _ in hist]
        partitions = []
        ages = []
        for (sid, p), v in sorted(lag.items(), key=lambda kv: (kv[0][0], int(kv[0][1] or 0))):
            # the age of the checkpoint as ``samza-dsl status`` gives it: since it was written
            written = v.get("checkpoint-written-ms")
            age = None if written is None else round(max(0.0, now - written / 1000.0), 1)
            if age is not None:
                ages.append(age)
            partitions.append({"stream": sid, "partition": p, "kind": kinds.get(sid, "input"),
                               "lag": int(v.get("lag", 0)), "behind": int(v.get("behind", 0)),
                               "end": int(v.get("end-offset", 0)), "checkpoint_age_s": age})
        conts: list[dict[str, Any]] = []
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
        inputs = [v for v in streams.values() if v["kind"] == "input"]
        headline = {"behind": sum(v["behind"] for v in inputs),
                    # input offsets processed a second; without inputs, the containers' messages
                    "rate": (round(sum(float(v["rate"]) for v in inputs), 1) if inputs
                             else round(sum(float(c["rate"]) for c in conts), 1)),
                    "lag": sum(v["lag"] for v in inputs), "end": sum(v["end"] for v in inputs),
                    "history": [[round(t - now, 1), b, n] for t, b, n in self.total]}
        return {"job": self.job, "time": int(now * 1000), "headline": headline,
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
        g = self.plan.dag
        for u, v in g.edges:
            sid = node_stream_id(v)
            if sid is not None and sid in inter:
                for consumer in self.plan.next_ops(v):
                    out[f"{u}->{consumer}"] = sid
        return out


def _trim(history: deque[Any], t: float) -> None:
    """Drops what is older than ``HISTORY_S`` before ``t``."""
    while history and history[0][0] < t - HISTORY_S:
        history.popleft()


def _rate_of(history: deque[tuple[float, int, int, int]], over_s: float = 2.0) -> float:
    """Messages a second a stream's next offsets moved over about the last ``over_s`` seconds
    of its history (0 with fewer than two points)."""
    if len(history) < 2:
        return 0.0
    t1, _, _, n1 = history[-1]
    first = history[-2]
    for point in list(history)[-2::-1]:
        if t1 - point[0] > over_s:
            break
        first = point
    t0, n0 = first[0], first[3]
    return round(max(0.0, (n1 - n0) / (t1 - t0)), 1) if t1 > t0 else 0.0
