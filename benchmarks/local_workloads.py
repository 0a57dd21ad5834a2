"""Benchmark workloads on the embedded local system (see docs/benchmarks.md): W1 with its LMDB table
and changelog (``W1L``), and W6, the restart of a W1 job holding 10^5 and 10^6 keys.

Each job runs in a fresh temporary ``job.dir``; its input is loaded into the local log before the
clock starts, so the timed part is ``LocalRunner(app, config).run()`` alone: opening the job and
its stores, processing, commits and the final flush.

    python benchmarks/run.py W1L --runs 3
    python benchmarks/run.py W6 --runs 1

W1L's line is workload "W1" with params store "lmdb+changelog", system "local"; its baseline is the
best of three plain loops over the same messages, in the same run.

W6 emits one line per (keys, mode): ``seconds`` is the time from the start of
``LocalRunner.run()`` to the counter's first call (the median of three restarts, each loading one
new message), ``seconds_run`` the whole restarted run, ``restore_seconds`` and
``entries_replayed`` what ``LocalState.restores`` recorded. Its baseline is the same mode's time at
10^5 keys in the same run, so ``growth_vs_1e5`` is the 10^6/10^5 ratio (``ratio`` is its inverse,
as a rate ratio). A last line per run gives both growth ratios (target for host affinity: <= 1.5).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import msgspec

from benchmarks.common import emit, timed
from benchmarks.peers.workload import best_of
from benchmarks.workloads import w1_baseline
from examples.readwrite_counter import CountInTable
from examples.readwrite_counter import app as w1_local_app
from runtime.engine.codec import fast_deserializer, fast_serializer
from runtime.local.system import LocalJob
from runtime.runner import LocalRunner
from runtime.state.lmdb_store import LmdbStore
from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

__all__ = ["run_w1_local", "run_w6", "run_w8", "w6_growth"]

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()
PAD = "x" * 100
COMMIT_MS = 1000
BASELINE_REPEATS = 3
RESTARTS = 3  # restarts per W6 mode (the median is reported)


def _progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


#: settings ``run.py --config KEY=VALUE`` adds to the local workloads' jobs (metrics on or
#: off, reporters), passed to a fresh process through the environment
EXTRA_CONFIG = "SAMZA_DSL_BENCH_CONFIG"


def _config(job_dir: str) -> dict[str, Any]:
    extra = json.loads(os.environ.get(EXTRA_CONFIG, "{}"))
    return {"job.dir": job_dir, "task.commit.ms": COMMIT_MS, **extra}


def _ids(n: int, seed: int = 1) -> list[int]:
    rnd = random.Random(seed)
    return [rnd.randint(1, 10_000) for _ in range(n)]


def _events(ids: list[int]) -> Iterator[KV[str, dict[str, Any]]]:
    for i in ids:
        yield KV(str(i), {"id": i, "pad": PAD})


def _load(app: StreamApplication, config: dict[str, Any], messages: Any) -> int:
    job = LocalJob(app, config, run=False)
    try:
        return job.load("events", messages)
    finally:
        job.close()


def _table(job_dir: str, store: str = "counts",
           serde: KVSerde | None = None) -> dict[str, Any]:
    """Every entry of the LMDB table over all tasks, read from the closed job's store files
    (``serde``: the table's, by default string keys and JSON values)."""
    root = os.path.join(job_dir, "stores", store)
    serde = serde or KVSerde(StringSerde(), JsonSerde())
    out: dict[str, Any] = {}
    for task in sorted(os.listdir(root)):
        s = LmdbStore.open(os.path.join(root, task), name=store, task=task,
                           key_encode=serde.key_serde.serialize,
                           key_decode=serde.key_serde.deserialize,
                           value_encode=serde.value_serde.serialize,
                           value_decode=serde.value_serde.deserialize)
        try:
            out.update(s.all())
        finally:
            s.close()
    return out


def _emitted(job: LocalJob, stream_id: str) -> int:
    """How many records the run appended to an output (without decoding them)."""
    log = job.log_of(job.stream_system[stream_id])
    phys = job.physical[stream_id]
    return sum(log.end_offset(phys, p) - start
               for p, start in enumerate(job.output_start[stream_id]))


# -- W1 on the local system (W1L, W1J) ---------------------------------------------------------

def _counter_app(name: str, serde: KVSerde, counter: CountInTable) -> StreamApplication:
    """examples/readwrite_counter.py's job with ``serde`` for its input, table and output."""
    app = StreamApplication(name, config={"task.commit.ms": COMMIT_MS})
    local = LocalSystem("local")
    events = app.input(local.input("events", serde=serde, partitions=4))
    counts = app.output(local.output("counts", serde=serde, partitions=4))
    app.table("counts", serde=serde)
    events.map(counter, name="count").send_to(counts)
    return app


def w1j_app() -> StreamApplication:
    """W1 as users write it (W1J): one ``KVSerde(JsonSerde(), JsonSerde())`` for the input, the
    table and the output; the counter itself is examples/readwrite_counter.py's."""
    return _counter_app("readwrite-counter-json", KVSerde(JsonSerde(), JsonSerde()),
                        CountInTable())


def w1_floor(parts: dict[int, list[tuple[bytes, bytes]]],
             serde: KVSerde) -> list[tuple[bytes, bytes, None]]:
    """The least work W1L's or W1J's semantics ask of each message, as one plain loop with no
    runtime: decode its key and value with the job's serdes into a ``KV``, call the job's own
    counter against a dict for a table, and encode the ``KV`` it returns with the output's
    serdes into a record. No log, no store, no commit. Returns the records."""
    counter = CountInTable()
    table: dict[Any, Any] = {}
    counter.table = SimpleNamespace(get=table.get, put=table.__setitem__)  # type: ignore[attr-defined]
    count = type(counter).__call__.__get__(counter)
    kde, vde = fast_deserializer(serde.key_serde), fast_deserializer(serde.value_serde)
    kse, vse = fast_serializer(serde.key_serde), fast_serializer(serde.value_serde)
    out = []
    for records in parts.values():
        for k, v in records:
            r = count(KV(kde(k), vde(v)))
            out.append((kse(r.key), vse(r.value), None))
    return out


def _making(n: int, fn: Any) -> Any:
    """``fn``, checked to make ``n`` outputs each time it is called (for ``best_of``)."""
    def run() -> None:
        got = fn()
        assert got == n, f"{fn} made {got} of {n}"
    return run


def run_w1_local(n: int, variant: str = "W1L") -> dict[str, Any]:
    """W1 on the local system: ``W1L`` examples/readwrite_counter.py (string keys, JSON values),
    ``W1J`` :func:`w1j_app` (JSON keys and values everywhere)."""
    if variant == "W1L":
        app, table_serde, workload = w1_local_app, None, "W1"
        serde = KVSerde(StringSerde(), JsonSerde())
    elif variant == "W1J":
        app, table_serde, workload = w1j_app(), KVSerde(JsonSerde(), JsonSerde()), "W1J"
        serde = KVSerde(JsonSerde(), JsonSerde())
    else:
        raise ValueError(f"unknown W1 variant {variant!r}: W1L or W1J")
    ids = _ids(n)
    # the baseline's input: the same messages as JSON bytes (partitioning does not matter to it)
    parts: dict[int, list[KV[str, bytes]]] = {p: [] for p in range(4)}
    for i in ids:
        parts[i % 4].append(KV(str(i), _enc.encode({"id": i, "pad": PAD})))
    # the practical limit: the best of a few loops (one loop of ~0.5 s varies by +-25% here)
    base_s = best_of(BASELINE_REPEATS, _making(n, lambda: w1_baseline(parts)))
    # the floor: the same messages as the job's records, through the least work its semantics ask
    records = {p: [(serde.key_serde.serialize(kv.key), kv.value) for kv in msgs]
               for p, msgs in parts.items()}
    parts.clear()
    floor_s = best_of(BASELINE_REPEATS, _making(n, lambda: len(w1_floor(records, serde))))
    records.clear()

    d = tempfile.mkdtemp(prefix="w1l-")
    try:
        config = _config(d)
        load_s, loaded = timed(lambda: _load(app, config, _events(ids)))
        assert loaded == n
        # the input was there before the job: its pages reach the disk before the clock starts,
        # not during the run (on 2 cores the kernel's writeback would compete with the job)
        os.sync()
        runner = LocalRunner(app, config)
        secs, _ = timed(runner.run)
        commits = runner.container.commits if runner.container is not None else None
        try:
            out = runner.messages("counts")
        finally:
            runner.close()
        truth = Counter(str(i) for i in ids)
        assert len(out) == n, f"{variant} emitted {len(out)} of {n}"
        last: dict[str, int] = {}
        for kv in out:
            if kv.value > last.get(kv.key, 0):
                last[kv.key] = kv.value
        assert last == truth, f"{variant}: the emitted counts differ from the true counts"
        table = _table(d, serde=table_serde)
        assert table == truth, f"{variant}: the table's final counts differ from the true counts"
    finally:
        shutil.rmtree(d, ignore_errors=True)
    params = {"messages": n, "partitions": 4, "store": "lmdb+changelog", "system": "local"}
    if variant == "W1J":
        params["serdes"] = "KVSerde(JsonSerde(), JsonSerde()) input, table, output"
    extra = json.loads(os.environ.get(EXTRA_CONFIG, "{}"))
    if extra:
        params["config"] = extra
    return emit(workload, params, n, secs, "plain-python-loop", n / base_s,
                baseline_repeats=BASELINE_REPEATS, load_seconds=round(load_s, 3),
                commits=commits, floor_msgs_per_s=round(n / floor_s, 1),
                floor_ratio=round(base_s / floor_s, 3), of_floor=round(floor_s / secs, 3))


# -- W6: recovery ------------------------------------------------------------------------------

class _FirstCall(CountInTable):
    """W1's counter, noting when it first processed a message (time.perf_counter())."""

    first: float | None = None  # class-wide: every task's copy writes here

    def __call__(self, event: KV[str, dict[str, Any]]) -> KV[str, int]:
        if _FirstCall.first is None:
            _FirstCall.first = time.perf_counter()
        return super().__call__(event)


def w6_app() -> StreamApplication:
    """The job of examples/readwrite_counter.py, with the counter noting its first call."""
    return _counter_app("readwrite-counter", KVSerde(StringSerde(), JsonSerde()), _FirstCall())


def _restart(app: StreamApplication, config: dict[str, Any], key: str,
             expect: int) -> dict[str, Any]:
    """Loads one message for ``key``, runs the job, checks it counted ``expect``. Times: to the
    first processed message and the whole run (open, restore, process, commit, close)."""
    _load(app, config, [KV(key, {"id": int(key), "pad": PAD})])
    _FirstCall.first = None
    runner = LocalRunner(app, config)
    t0 = time.perf_counter()
    runner.run()
    total = time.perf_counter() - t0
    try:
        out = runner.messages("counts")
        restores = dict(runner.job.state.restores)
    finally:
        runner.close()
    assert _FirstCall.first is not None, "W6: the restarted job processed no message"
    assert out == [KV(key, expect)], f"W6: the restarted job emitted {out!r}, not {key}={expect}"
    restore_s = sum(r["seconds"] for r in restores.values())
    replayed = sum(int(r.get("entries_replayed", 0)) for r in restores.values())
    return {"first": _FirstCall.first - t0, "total": total, "restore_s": restore_s,
            "replayed": replayed, "modes": sorted({r["mode"] for r in restores.values()}),
            "stores": len(restores)}


def _median_restart(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The restart with the median time to the first message, with every sample's time."""
    ordered = sorted(samples, key=lambda r: r["first"])
    out = dict(ordered[len(ordered) // 2])
    out["samples"] = [round(r["first"], 4) for r in samples]
    return out


def run_w6(keys: int, baseline: dict[str, float] | None = None,
           baseline_keys: int | None = None) -> dict[str, dict[str, Any]]:
    """One W6 run at ``keys`` keys: a JSON line per mode (host affinity, changelog replay).

    ``baseline`` is {mode: seconds to the first message} at 10^5 keys from the same run, the
    figure each line is compared with, at ``baseline_keys`` (None: this run is that baseline)."""
    app = w6_app()
    d = tempfile.mkdtemp(prefix="w6-")
    lines: dict[str, dict[str, Any]] = {}
    try:
        config = _config(d)
        _progress(f"W6 keys={keys}: loading {keys} messages (one per key)")
        load_s, loaded = timed(lambda: _load(app, config, _events(list(range(1, keys + 1)))))
        assert loaded == keys
        _progress(f"W6 keys={keys}: loaded in {load_s:.1f} s; first run (fills the table)")
        fill_s, runner = timed(lambda: LocalRunner(app, config).run())
        try:
            emitted = _emitted(runner.job, "counts")
        finally:
            runner.close()
        assert emitted == keys, f"W6: the first run emitted {emitted} of {keys}"
        _progress(f"W6 keys={keys}: first run {fill_s:.1f} s ({keys / fill_s:,.0f} msgs/s)")

        # each restart loads one message for key "1", whose count is then 2, 3, ...
        count = 1
        results: dict[str, dict[str, Any]] = {}
        samples: list[dict[str, Any]] = []
        for _ in range(1 + RESTARTS):  # the first restart warms the process up: not counted
            count += 1
            r = _restart(app, config, "1", count)
            assert r["modes"] == ["host-affinity"], f"W6 host affinity: modes {r['modes']}"
            assert r["replayed"] == 0, f"W6 host affinity replayed {r['replayed']} entries"
            samples.append(r)
        results["host-affinity"] = _median_restart(samples[1:])
        _progress(f"W6 keys={keys}: host affinity: first message after "
                  f"{results['host-affinity']['first']:.4f} s (median of {RESTARTS})")

        samples = []
        for _ in range(RESTARTS):
            count += 1
            shutil.rmtree(os.path.join(d, "stores"))
            r = _restart(app, config, "1", count)
            assert r["modes"] == ["rebuilt"], f"W6 changelog replay: modes {r['modes']}"
            assert r["replayed"] >= keys, f"W6 replay: {r['replayed']} entries for {keys} keys"
            samples.append(r)
        results["changelog-replay"] = r = _median_restart(samples)
        _progress(f"W6 keys={keys}: changelog replay: first message after {r['first']:.3f} s "
                  f"({r['replayed']} entries in {r['restore_s']:.2f} s; median of {RESTARTS})")

        for mode, r in results.items():
            base = (baseline or {}).get(mode, r["first"])
            rate = r["replayed"] / r["restore_s"] if r["replayed"] and r["restore_s"] else None
            lines[mode] = emit(
                "W6", {"keys": keys, "mode": mode}, 1, r["first"],
                f"seconds-to-first-message at {baseline_keys or keys} keys (same run)", 1 / base,
                seconds_to_first_message=round(r["first"], 4),
                samples_to_first_message=r["samples"],
                seconds_run=round(r["total"], 4),
                restore_seconds=round(r["restore_s"], 4),
                entries_replayed=r["replayed"],
                replay_entries_per_s=round(rate, 1) if rate else None,
                growth_vs_1e5=round(r["first"] / base, 3),
                fill_seconds=round(fill_s, 3), load_seconds=round(load_s, 3))
    finally:
        with contextlib.suppress(Exception):
            shutil.rmtree(d, ignore_errors=True)
    return lines


def w6_growth(small: dict[str, dict[str, Any]], large: dict[str, dict[str, Any]],
              small_keys: int, large_keys: int) -> dict[str, Any]:
    """The ratio large/small of the time to the first message, per mode, as one JSON line
    (the target for host affinity: at most 1.5)."""
    growth = {mode: round(large[mode]["seconds_to_first_message"]
                          / small[mode]["seconds_to_first_message"], 3) for mode in large}
    replay = {k: ln["changelog-replay"]["replay_entries_per_s"]
              for k, ln in ((small_keys, small), (large_keys, large))}
    line = {"workload": "W6", "growth": True, "keys": [small_keys, large_keys],
            "ratio_first_message": growth,
            "replay_entries_per_s": {str(k): v for k, v in replay.items()},
            "host_affinity_target_max": 1.5,
            "host_affinity_ok": growth["host-affinity"] <= 1.5}
    print(json.dumps(line), flush=True)
    return line


# -- W8: W1 in 1 and 2 container processes -----------------------------------------------------

def run_w8(n: int) -> dict[str, Any]:
    """W1L's job (LMDB table with changelog, 4 partitions) with ``job.container.count`` 1, then
    2, each on the same input in a fresh job directory. Both are timed the same way: the whole
    ``LocalRunner.run()`` (with 2 containers: preparing the run, forking both processes, their
    runs and their exits). The baseline is the 1-container rate of the same run."""
    ids = _ids(n)
    rates: dict[int, float] = {}
    seconds: dict[int, float] = {}
    for count in (1, 2):
        with tempfile.TemporaryDirectory(prefix="samza-w8-") as tmp:
            job_dir = os.path.join(tmp, "job")
            config = {**_config(job_dir), "job.container.count": count}
            _load(w1_local_app, config, _events(ids))
            _progress(f"W8: {n} messages, {count} container(s)")
            secs, runner = timed(lambda config=config: LocalRunner(w1_local_app, config).run())
            emitted = _emitted(runner.job, "counts")
            runner.close()
            if emitted != n:
                raise AssertionError(f"W8 with {count} container(s) emitted {emitted} of {n}")
            counts = _table(job_dir)
            if sum(counts.values()) != n or counts != {str(k): v for k, v in Counter(ids).items()}:
                raise AssertionError(f"W8 with {count} container(s): the table's counts are wrong")
            seconds[count], rates[count] = secs, n / secs
    return emit("W8", {"containers": 2, "store": "lmdb+changelog", "system": "local",
                       "cores": os.cpu_count()},
                n, seconds[2], "w1-local-1-container", rates[1],
                one_container_seconds=round(seconds[1], 4))
