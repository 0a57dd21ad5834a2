"""``SparkRunner``: compiles an application's ``ExecutionPlan`` to PySpark for bounded reprocessing.

How the plan maps onto Spark:

- **Passes.** Stages that share a table run together (the table is state of their task); every
  other stage is a pass of its own. Passes run in the order of the streams between them.
- **Inputs** are read inside executors, one Spark partition per source partition (a JSON Lines
  file split, a Parquet row group, a list partition, a Kafka partition).
- **Narrow passes** (no intermediate input, and no window, join or table unless one input
  feeds the pass in as many partitions as its source has) run each source partition through the
  stages' operators where it was read: no shuffle.
- **Every other pass** gets its records by a shuffle into the pass's task partitions: an
  intermediate stream's records go to the partition the streaming runtime would write them to
  (murmur2 of the serialized key, into the planned count); an input's records stay in their own
  partition. Within a task partition, records are sorted by (event time, source partition,
  source offset), and run through the same operator code as the streaming runtime
  (``runtime.spark.executor``).
- **Outputs** are staged and swapped in when everything is written (``runtime.spark.sinks``).
  Nothing is collected to the driver unless ``ReprocessResult.messages`` asks for it.

Time. An input that declares ``event_time`` is ordered by it, so event-time windows give the
panes a streaming run gives when nothing arrives late (here each key's messages arrive in
event-time order, so none is late). A window whose event time the input does not declare, fed by
one input partition in a narrow pass with no async step before it, sees that partition in offset
order and moves its watermark per message, as the streaming runtime does: its late messages are
counted (``ReprocessResult.late_counts``, the summary) and written to its ``late_to`` stream as
in a streaming run; elsewhere such a window closes its panes at the end of the pass.
Processing-time windows and join TTLs use each record's timestamp as the clock: the input's timestamp column (``FileInput(...,
timestamp=)``), the Kafka record timestamp, else its event time; records with neither all get
the time the run started.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import fields, is_dataclass
from typing import Any

from operators.hashing import KeyPartitioner
from runtime.late import LateCounts
from runtime.memory import resolve_partitions
from runtime.spark.executor import ALL_PARTITIONS, PassExecutor, PassFailure, per_message_windows
from runtime.spark.meter import (
    HANDLE_NS,
    LATE_DROPPED,
    LATE_SENT,
    MESSAGES_IN,
    MESSAGES_OUT,
    PANES_EMITTED,
    meter_names,
)
from runtime.spark.progress import STAGE_PREFIX
from runtime.spark.sinks import FileOutput, resolve_output
from runtime.spark.sources import FileInput, Source, SourceError, resolve_source
from samza_dsl import StreamApplication
from samza_dsl.errors import SamzaError
from samza_dsl.serdes import KVSerde
from samza_dsl.spec import JoinSpec, WindowSpec

__all__ = ["SparkRunner", "ReprocessResult", "ReprocessError", "spark_session"]

_ORDER = operator.itemgetter(1, 2, 3, 0)  # sort ms, source partition, offset, stream id
_OFFSET_ORDER = operator.itemgetter(2, 3, 0)  # source partition, offset, stream id
_OUR_PACKAGES = ("samza_dsl", "planner", "operators", "runtime")


def _first_of(streams: frozenset[str], order: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``order`` with the records of ``streams`` before every other record."""
    def key(rec: Any) -> Any:
        return rec[0] not in streams, order(rec)
    return key
_OP = "op:"  # accumulator keys of operator meters: op:<op id>|<metric>


class ReprocessError(SamzaError):
    """A reprocessing run failed; nothing was written."""


def spark_session(master: str = "local[2]", app_name: str = "samza-dsl",
                  conf: Mapping[str, str] | None = None, *, quiet: bool = True) -> Any:
    """A SparkSession for reprocessing (``spark.ui.enabled`` off; a session already running is
    reused). ``conf``: Spark settings, over these defaults. ``quiet`` starts the JVM without its
    start-up warnings and with its log at FATAL (``runtime.spark.jvm``); errors are raised."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    # executors run this interpreter, which has the application's packages
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {"spark.master": master, "spark.app.name": app_name,
                "spark.pyspark.python": os.environ["PYSPARK_PYTHON"],
                "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": "8", **(conf or {})}
    if quiet:
        from runtime.spark.jvm import start_quietly

        start_quietly(SparkConf().setAll(list(settings.items())))
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


class _Counts:
    """A Spark accumulator of ``{name: count}``."""

    def __init__(self, sc: Any) -> None:
        from pyspark.accumulators import AccumulatorParam

        class DictSum(AccumulatorParam):
            def zero(self, value: dict[str, int]) -> dict[str, int]:
                return {}

            def addInPlace(self, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:  # noqa: N802
                for k, v in b.items():
                    a[k] = a.get(k, 0) + v
                return a

        self.acc = sc.accumulator({}, DictSum())


class ReprocessResult(LateCounts):
    """What a ``reprocess`` run did: rows in and out per stream, time, the outputs, the
    late messages of its windows (``late_counts``, ``late(window, stream=...)``: see
    ``runtime.late``; ``metrics``: counters summed over every task), and what each operator did.

    ``operators``: ``{op id: {metric: value}}`` for every operator of the plan, in plan order,
    summed over every task, by the names the streaming runtime uses (``runtime.spark.meter``):
    ``messages-in``, ``messages-out``, ``handle-ns`` (nanoseconds in the operator's own
    function, not the operators after it; per-message calls sampled and scaled), and for windows ``panes-emitted`` and
    ``late-messages-dropped`` (``late-messages-sent`` too when it has ``late_to``). The summary
    prints them as a table, one line per operator."""

    def __init__(self, runner: SparkRunner, plan: Any, rows_in: dict[str, int],
                 rows_out: dict[str, int], seconds: float, kept: dict[str, Any],
                 written: dict[str, Any], metrics: dict[str, int] | None = None,
                 operators: dict[str, dict[str, int]] | None = None) -> None:
        self._runner = runner
        self.metrics = dict(metrics or {})
        self.operators = dict(operators or {})
        self.plan = plan
        self.rows_in = rows_in
        self.rows_out = rows_out
        self.seconds = seconds
        self._kept = kept
        self.written = written

    @property
    def outputs(self) -> list[str]:
        return sorted(self.plan.output_streams)

    def messages(self, stream: Any) -> list[Any]:
        """Every message of output ``stream``, collected to the driver (KV for keyed streams).
        An output written to files is read back from them."""
        sid = stream if isinstance(stream, str) else str(getattr(stream, "stream_id", stream))
        if sid in self._kept:
            return list(self._kept[sid].collect())
        out = self.written.get(sid)
        if isinstance(out, FileOutput):
            descriptor = self.plan.streams[sid].descriptor
            src = resolve_source(self._runner.spark, sid, descriptor,
                                 FileInput(out.path, format=out.format), 0)
            return list(src.rdd(self._runner.spark).map(operator.itemgetter(5)).collect())
        if out is not None:
            raise ReprocessError(f"output {sid!r} was written to {out}; read it from there")
        raise KeyError(f"no output {sid!r} in this run; outputs: {', '.join(self.outputs)}")

    def _late_snapshot(self) -> dict[str, Any]:
        return self.metrics

    def summary(self) -> str:
        lines = [f"reprocessed {self.plan.job_name!r} in {self.seconds:.1f} s"]
        width = max([len(s) for s in (*self.rows_in, *self.rows_out)] + [6])
        lines.append(f"  {'stream':<{width}}  {'kind':<12}  {'rows':>12}  to")
        for sid, n in sorted(self.rows_in.items()):
            lines.append(f"  {sid:<{width}}  {'input':<12}  {n:>12,}")
        for sid, n in sorted(self.rows_out.items()):
            kind = self.plan.streams[sid].kind if sid in self.plan.streams else "output"
            where = self.written.get(sid)
            lines.append(f"  {sid:<{width}}  {kind:<12}  {n:>12,}  "
                         f"{where if where is not None else ('(kept)' if kind == 'output' else '')}"
                         .rstrip())
        if any(op.opcode == "window" for op in self.plan.app.operators):
            lines.extend(self.late_summary() or ["late: no late messages"])
        lines.extend(self.operator_summary())
        return "\n".join(lines)

    def operator_summary(self) -> list[str]:
        """The operators as a table, one line each in plan order: op id, kind, messages in and
        out, time in the operator's own function (ms), and for windows panes and late messages
        (dropped; ``N sent`` when it has ``late_to``)."""
        if not self.operators:
            return []
        kinds = {op.op_id: op.opcode for op in self.plan.app.operators}
        width = max(len(op_id) for op_id in self.operators)
        kind_w = max([len(kinds.get(op_id, "")) for op_id in self.operators] + [4])
        rows = [f"  {'operator':<{width}}  {'kind':<{kind_w}}  {'in':>12}  {'out':>12}  "
                f"{'ms':>10}  {'panes':>9}  late"]
        for op_id, m in self.operators.items():
            row = (f"  {op_id:<{width}}  {kinds.get(op_id, ''):<{kind_w}}  "
                   f"{m[MESSAGES_IN]:>12,}  {m[MESSAGES_OUT]:>12,}  "
                   f"{m[HANDLE_NS] / 1e6:>10,.1f}")
            if PANES_EMITTED in m:
                late = f"{m[LATE_SENT]:,} sent" if LATE_SENT in m else f"{m[LATE_DROPPED]:,}"
                row += f"  {m[PANES_EMITTED]:>9,}  {late}"
            rows.append(row)
        return rows

    def __repr__(self) -> str:
        return (f"ReprocessResult({self.plan.job_name!r}, rows_in={self.rows_in}, "
                f"rows_out={self.rows_out}, seconds={self.seconds:.2f})")


class SparkRunner:
    """Reprocesses bounded inputs with an application's own plan and operators on Spark.

    Args:
        spark: a SparkSession to use; None starts one on first use (quietly, see
            ``spark_session``).
        master: the master of the session it starts (``local[2]``, ``spark://host:port``).
        conf: Spark settings for the session it starts.

    Example:
        >>> runner = SparkRunner(master="local[2]")                   # doctest: +SKIP
        >>> result = runner.reprocess(app, {"page-views": "views.parquet"},
        ...                           outputs={"counts": "out/counts.jsonl"})  # doctest: +SKIP
        >>> print(result.summary())                                   # doctest: +SKIP
    """

    def __init__(self, spark: Any = None, *, master: str = "local[2]",
                 conf: Mapping[str, str] | None = None) -> None:
        self._spark = spark
        self.master = master
        self.conf = dict(conf or {})  # Spark settings for the session this runner starts

    @property
    def spark(self) -> Any:
        if self._spark is None:
            self._spark = spark_session(self.master, conf=self.conf)
        return self._spark

    def reprocess(self, app: StreamApplication, inputs: Mapping[str, Any],
                  outputs: Mapping[str, Any] | None = None,
                  config: Mapping[str, Any] | None = None) -> ReprocessResult:
        """Run ``app`` over bounded inputs, as the streaming runtime would over the same data.

        Args:
            app: the application.
            inputs: stream id -> a path (JSON Lines or Parquet), a ``FileInput``, a DataFrame,
                a list of messages, ``{partition: [messages]}`` or a ``KafkaRange``.
            outputs: stream id -> a path or a ``KafkaOutput``; outputs not named here are kept
                for ``result.messages``.
            config: the application's config for this run.

        Returns:
            A ``ReprocessResult``: rows in and out per stream, late messages, ``messages()``.

        Raises:
            TypeError: ``app`` is not a ``StreamApplication``.
            SourceError: an input that cannot be read (it names the stream and path).
            ReprocessError: an operator or a record failed (it names the operator, stream,
                file and row); a failed run leaves earlier outputs as they were.
        """
        if not isinstance(app, StreamApplication):
            raise TypeError(f"reprocess takes a StreamApplication, got {type(app).__name__}")
        t0 = time.monotonic()
        start_ms = int(time.time() * 1000)
        outputs = dict(outputs or {})
        _check_ids(app, inputs, outputs)
        spark = self.spark
        sc = spark.sparkContext
        sources = {sid: resolve_source(spark, sid, app.spec().inputs[sid], value, start_ms)
                   for sid, value in inputs.items()}
        partitions = {sid: s.partitions for sid, s in sources.items()
                      if app.spec().inputs[sid].partitions is None}
        plan = app.plan(partitions=partitions, config=config)
        _ship_user_code(spark, plan)
        counts = resolve_partitions(plan)
        run_id = uuid.uuid4().hex[:12]
        sinks = {sid: resolve_output(sid, value, run_id) for sid, value in outputs.items()}
        for sink in sinks.values():
            if hasattr(sink, "prepare"):
                sink.prepare(plan, counts)

        tally = _Counts(sc)
        compiled = _Compiler(spark, plan, counts, sources, tally.acc)
        kept: dict[str, Any] = {}
        staged: list[Any] = []
        try:
            ends = compiled.build()
            for sid in sorted(plan.output_streams):
                rdd = compiled.messages(sid)
                if sid in sinks:
                    sc.setJobDescription(f"samza-dsl {plan.job_name}: write {sid} to "
                                         f"{sinks[sid]}")
                    staged.append(sinks[sid])
                    sinks[sid].stage(spark, rdd)
                else:
                    kept[sid] = rdd.persist()
                    sc.setJobDescription(f"samza-dsl {plan.job_name}: compute {sid}")
                    rdd.count()
            for rdd in ends:  # passes nothing reads yet (sinks, tables): run them too
                sc.setJobDescription(f"samza-dsl {plan.job_name}: run {rdd.name()}")
                rdd.count()
            for sink in staged:
                sink.commit(spark)
        except Exception as exc:
            for sink in staged:
                sink.abort(spark)
            for rdd in kept.values():
                rdd.unpersist()
            raise _reprocess_error(plan, exc) from None
        finally:
            sc.setJobDescription(None)
            compiled.release()
        counted = dict(tally.acc.value)
        rows_in = {sid: counted.get("in:" + sid, 0) for sid in plan.input_streams}
        rows_out = {sid: counted.get("out:" + sid, 0)
                    for sid in (*plan.output_streams, *plan.intermediate_streams)}
        metrics = {k[len("metric:"):]: v for k, v in counted.items() if k.startswith("metric:")}
        return ReprocessResult(self, plan, rows_in, rows_out, time.monotonic() - t0, kept,
                               {sid: sinks[sid] for sid in sinks}, metrics,
                               _operator_metrics(plan, counted, metrics))

    def stop(self) -> None:
        if self._spark is not None:
            self._spark.stop()
            self._spark = None


def _operator_metrics(plan: Any, counted: Mapping[str, int],
                      metrics: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """``ReprocessResult.operators``: every operator of ``plan`` in plan order (stage by stage),
    its meters summed over tasks (``counted``: the accumulator), a window's late messages from
    its own counters (``metrics``), as ``late_counts`` takes them."""
    summed: dict[str, dict[str, int]] = {}
    for key, v in counted.items():
        if key.startswith(_OP):
            op_id, _, name = key[len(_OP):].rpartition("|")
            summed.setdefault(op_id, {})[name] = v
    out: dict[str, dict[str, int]] = {}
    for stage in plan.stages:
        for op_id in stage.operators:
            spec = plan.app.operator(op_id)
            window = isinstance(spec, WindowSpec)
            got = summed.get(op_id, {})
            m = {name: got.get(name, 0) for name in (MESSAGES_IN, MESSAGES_OUT, HANDLE_NS)}
            if window:
                m[PANES_EMITTED] = got.get(PANES_EMITTED, 0)
                m[LATE_DROPPED] = metrics.get(f"{op_id}.{LATE_DROPPED}", 0)
                if getattr(spec, "late_to", None) is not None:
                    m[LATE_SENT] = metrics.get(f"{op_id}.{LATE_SENT}", 0)
            out[op_id] = m
    return out


def _check_ids(app: StreamApplication, inputs: Mapping[str, Any],
               outputs: Mapping[str, Any]) -> None:
    known_in = sorted(app.spec().inputs)
    for sid in inputs:
        if sid not in app.spec().inputs:
            raise SourceError(f"{sid!r} is not an input stream of application {app.name!r}; "
                              f"its inputs: {', '.join(known_in) or 'none'}")
    missing = [sid for sid in known_in if sid not in inputs]
    if missing:
        raise SourceError(f"application {app.name!r} reads {', '.join(map(repr, missing))} but "
                          f"no input was given for it; give every input (--input id=PATH)")
    known_out = sorted(app.spec().outputs)
    for sid in outputs:
        if sid not in app.spec().outputs:
            raise SamzaError(f"{sid!r} is not an output stream of application {app.name!r}; "
                             f"its outputs: {', '.join(known_out) or 'none'}")


def _reprocess_error(plan: Any, exc: BaseException) -> BaseException:
    if isinstance(exc, SamzaError):
        return exc
    text = str(exc)
    found = re.search(re.escape(PassFailure.MARK) + r"(.*)", text)
    if found:
        return ReprocessError(found.group(1).strip())
    causes = re.findall(r"^(\w+(?:\.\w+)*(?:Error|Exception|Exit)\b:? .*)$", text, re.M)
    causes = [c for c in causes if not c.startswith(("org.", "java.", "py4j."))]
    first = causes[-1] if causes else next(
        (ln for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    return ReprocessError(f"reprocessing {plan.job_name!r} failed in Spark: {first[:500]}")


# -- compiling the plan ----------------------------------------------------------------------------

def _passes(plan: Any) -> list[list[Any]]:
    """Stages grouped by shared tables, in the order of the streams between them."""
    group = {s.stage_id: i for i, s in enumerate(plan.stages)}

    def find(i: int) -> int:
        while group_of[i] != i:
            i = group_of[i]
        return i

    group_of = list(range(len(plan.stages)))
    by_table: dict[str, int] = {}
    for i, s in enumerate(plan.stages):
        for t in (*s.tables_read, *s.tables_written):
            if t in by_table:
                group_of[find(i)] = find(by_table[t])
            else:
                by_table[t] = i
    groups: dict[int, list[Any]] = {}
    for s in plan.stages:
        groups.setdefault(find(group[s.stage_id]), []).append(s)
    passes = list(groups.values())
    writes = [set(itertools.chain.from_iterable(s.outputs for s in p)) for p in passes]
    reads = [set(itertools.chain.from_iterable(s.inputs for s in p)) for p in passes]
    order: list[int] = []
    done: set[int] = set()
    while len(order) < len(passes):
        ready = [i for i in range(len(passes)) if i not in done
                 and all(j in done or j == i or not (writes[j] & reads[i])
                         for j in range(len(passes)))
                 and not (writes[i] & reads[i])]
        if not ready:
            stuck = [", ".join(s.stage_id for s in passes[i]) for i in range(len(passes))
                     if i not in done]
            raise SamzaError(f"cannot reprocess {plan.job_name!r} on Spark: stages that share a "
                             f"table also read what they write ({'; '.join(stuck)}); Spark runs "
                             f"a pass after everything it reads is complete")
        order.append(ready[0])
        done.add(ready[0])
    return [passes[i] for i in order]


class _Compiler:
    """Builds the RDD of each pass: ``(target partition, record)`` for everything it writes."""

    def __init__(self, spark: Any, plan: Any, counts: dict[str, int],
                 sources: dict[str, Source], acc: Any) -> None:
        self.spark = spark
        self.sc = spark.sparkContext
        self.plan = plan
        self.counts = counts
        self.sources = sources
        self.acc = acc
        self.out: dict[str, Any] = {}  # stream id -> the pass RDD that writes it
        self.readers: dict[int, int] = {}
        self.persisted: list[Any] = []
        self.pass_rdds: list[tuple[Any, set[str]]] = []
        self.labels: dict[str, str] = {}  # stream id -> what the pass writing it does

    def build(self) -> list[Any]:
        """Build every pass; returns the pass RDDs whose outputs nothing consumes (a pass with
        only sinks or tables), which must still be run."""
        plan = self.plan
        consumers: dict[str, int] = {}
        for s in plan.stages:
            for sid in s.inputs:
                consumers[sid] = consumers.get(sid, 0) + 1
        for sid in plan.output_streams:
            consumers[sid] = consumers.get(sid, 0) + 1
        ends = []
        for stages in _passes(plan):
            rdd = self._pass(stages)
            written = set(itertools.chain.from_iterable(s.outputs for s in stages))
            if sum(consumers.get(sid, 0) for sid in written) > 1:
                rdd = rdd.persist()
                self.persisted.append(rdd)
            for sid in written:
                self.out[sid] = rdd
            self.pass_rdds.append((rdd, written))
            if not any(consumers.get(sid, 0) for sid in written):
                ends.append(rdd)
        return ends

    def release(self) -> None:
        for rdd in self.persisted:
            rdd.unpersist()

    def messages(self, sid: str) -> Any:
        """The messages of output ``sid``."""
        rdd = self.out.get(sid)
        if rdd is None:
            return self.sc.emptyRDD()
        return self._only(rdd, sid).map(_message)

    def _only(self, rdd: Any, *sids: str) -> Any:
        """The items of a pass RDD that belong to streams ``sids``."""
        for r, written in self.pass_rdds:
            if r is rdd and written <= set(sids):
                return rdd
        wanted = frozenset(sids)
        return rdd.filter(lambda item: item[1][0] in wanted)

    def _pass(self, stages: list[Any]) -> Any:
        plan, counts, acc = self.plan, self.counts, self.acc
        stage_ids = [s.stage_id for s in stages]
        inputs = list(dict.fromkeys(itertools.chain.from_iterable(s.inputs for s in stages)))
        external = [sid for sid in inputs if sid in plan.input_streams]
        intermediate = [sid for sid in inputs if sid not in plan.input_streams]
        stateful = any(isinstance(plan.app.operator(op), WindowSpec | JoinSpec)
                       for s in stages for op in s.operators) \
            or any(s.tables_read or s.tables_written for s in stages)
        n = max(counts[sid] for sid in inputs)
        names = {sid: src.names for sid, src in self.sources.items()}
        config = plan.config
        name = "+".join(stage_ids)
        windows = frozenset(op for s in stages for op in s.operators
                            if isinstance(plan.app.operator(op), WindowSpec))

        def describe(sid: str, part: int, off: int) -> str:
            files = names.get(sid)
            if files is not None and 0 <= part < len(files):
                return f"{files[part]}, row {off}"
            return f"partition {part}, offset {off}"

        aligned = all(self.sources[sid].partitions == counts[sid] for sid in external)
        if not intermediate and (not stateful or (len(external) == 1 and aligned)):
            # narrow: each source partition is run where it was read
            rdds = [self.sources[sid].rdd(self.spark) for sid in external]
            union = rdds[0] if len(rdds) == 1 else self.sc.union(rdds)
            sort = stateful
            task_of_first = True
            # a window moving its watermark per record sees its partition in offset order
            order: Callable[[Any], Any] = _OFFSET_ORDER \
                if any(per_message_windows(plan, s) for s in stages) \
                else _ORDER
        else:
            parts = [self._keyed_input(sid, n) for sid in inputs]
            union = parts[0] if len(parts) == 1 else self.sc.union(parts)
            # the map side of this shuffle is a stage of its own: named by what it computes
            made = dict.fromkeys(self.labels.get(sid, f"read {sid}") for sid in inputs)
            with _call_site(self.sc, f"{STAGE_PREFIX}{plan.job_name}: {'; '.join(made)}"):
                union = union.partitionBy(n, _identity)
            sort = True
            task_of_first = False
            order = _ORDER

        # bootstrap inputs (side inputs too) are read whole before the pass's other records
        first = frozenset(sid for sid in external if plan.app.inputs[sid].bootstrap)
        if first:
            order = _first_of(first, order)
            sort = True

        def run(i: int, items: Any) -> Any:
            recs = list(items) if task_of_first else [rec for _, rec in items]
            if not recs and not stateful:
                return iter(())
            part = recs[0][2] if task_of_first and recs else i
            if sort:
                recs.sort(key=order)
            read: dict[str, int] = {}
            for sid, grp in itertools.groupby(recs, key=operator.itemgetter(0)):
                read[sid] = read.get(sid, 0) + sum(1 for _ in grp)
            ex = PassExecutor(plan, stage_ids, part, counts, config, describe=describe,
                              narrow=task_of_first)
            out = ex.run(recs)
            tally = {"out:" + sid: k for sid, k in ex.written.items()}
            for name, k in ex.metrics.items():  # counters (late messages), summed on the driver
                if type(k) is int:
                    tally["metric:" + name] = k
            for sid, k in read.items():
                if sid in plan.input_streams:
                    tally["in:" + sid] = k
            for op_id, meter in ex.meters.items():  # what each operator did, in this task
                if any(meter):
                    for metric, k in meter_names(meter, op_id in windows).items():
                        if k:
                            tally[f"{_OP}{op_id}|{metric}"] = k
            acc.add(tally)
            return iter(out)

        rdd = union.mapPartitionsWithIndex(run)
        rdd.setName(f"pass {name}")
        label = (f"{name}: {', '.join(inputs)} -> "
                 f"{', '.join(dict.fromkeys(o for s in stages for o in s.outputs))}")
        for s in stages:
            for sid in s.outputs:
                self.labels[sid] = label
        return rdd

    def _keyed_input(self, sid: str, n: int) -> Any:
        """Stream ``sid`` as ``(task partition, record)`` pairs for the pass's shuffle."""
        plan, counts = self.plan, self.counts
        if sid in plan.input_streams:
            src = self.sources[sid]
            rdd = src.rdd(self.spark)
            if src.partitions == counts[sid]:
                return rdd.map(lambda rec: (rec[2], rec))
            # the input declares another count than its source has: a keyed record goes to its
            # key's partition (as Kafka's default partitioner), any other stays in its own
            serde = plan.streams[sid].descriptor.serde
            m = counts[sid]
            if not isinstance(serde, KVSerde):
                return rdd.map(lambda rec: (rec[2] % m, rec))
            key_bytes = serde.key_serde.serialize

            def place_keyed(it: Any) -> Any:
                partitioner = KeyPartitioner(m, key_bytes)
                for rec in it:
                    yield partitioner(rec[5].key), rec
            return rdd.mapPartitions(place_keyed)
        producer = self.out[sid]
        rdd = self._only(producer, sid)
        if plan.streams[sid].kind == "broadcast":
            return rdd.flatMap(lambda item: [(p, item[1]) for p in range(n)]
                               if item[0] == ALL_PARTITIONS else [item])
        return rdd


def _identity(p: int) -> int:
    return p


@contextlib.contextmanager
def _call_site(sc: Any, text: str) -> Iterator[None]:
    """Spark's call site while RDDs are made: it names the stages that end with them. PySpark
    sets its own around each call unless one is set already (its nesting depth)."""
    try:
        from pyspark.traceback_utils import SCCallSiteSync
    except ImportError:  # pragma: no cover - another PySpark layout: Spark's own names
        yield
        return
    outer = SCCallSiteSync._spark_stack_depth == 0
    if outer:
        sc._jsc.setCallSite(text)
    SCCallSiteSync._spark_stack_depth += 1
    try:
        yield
    finally:
        SCCallSiteSync._spark_stack_depth -= 1
        if outer:
            sc._jsc.setCallSite(None)


def _message(item: tuple[int, tuple[Any, ...]]) -> Any:
    return item[1][5]


# -- shipping user code to executors --------------------------------------------------------------

def _user_modules(plan: Any) -> set[str]:
    """Modules of the functions an application's operators and inputs call."""
    found: set[str] = set()
    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if depth > 4 or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, tuple | list):
            for x in obj:
                visit(x, depth + 1)
            return
        if is_dataclass(obj) and not isinstance(obj, type):
            for f in fields(obj):
                visit(getattr(obj, f.name, None), depth + 1)
            return
        if callable(obj):
            mod = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", None)
            if mod:
                found.add(mod)
            closure = getattr(obj, "__closure__", None) or ()
            for cell in closure:
                with contextlib.suppress(ValueError):
                    visit(cell.cell_contents, depth + 1)

    for spec in plan.app.operators.values() if isinstance(plan.app.operators, dict) \
            else plan.app.operators:
        visit(spec, 0)
    for d in plan.app.inputs.values():
        visit(d.event_time, 0)
    return found


def _importable_by_name(module: Any) -> bool:
    """Whether executors import ``module`` by its name: our packages, the standard library, and
    any module the driver finds by name on its ``sys.path`` (which executors are given)."""
    name = module.__name__
    top = name.split(".")[0]
    if top in _OUR_PACKAGES or top in sys.stdlib_module_names or top == "builtins":
        return True
    path = getattr(module, "__file__", None)
    if path is None or name == "__main__":
        return path is None and name != "__main__"
    # look the name up afresh on the path (importlib.util.find_spec would answer from
    # sys.modules, where a module loaded from a file under a made-up name also sits)
    from importlib.machinery import PathFinder

    parent, _, leaf = name.rpartition(".")
    if parent:
        package = sys.modules.get(parent)
        search = getattr(package, "__path__", None)
        if search is None:
            return False
        spec = PathFinder.find_spec(name, list(search))
    else:
        spec = PathFinder.find_spec(leaf, sys.path)
    origin = getattr(spec, "origin", None)
    return origin is not None and os.path.realpath(origin) == os.path.realpath(path)


def _ship_user_code(spark: Any, plan: Any) -> None:
    """Executors import what the driver can: they get the driver's ``sys.path``. The modules of
    the application's functions that cannot be imported by name (a script, a notebook's
    ``__main__``, a test file) go by value. (A ``msgspec.Struct`` class defined in such a module
    cannot be rebuilt in an executor: define message types in an importable module.)"""
    from pyspark import cloudpickle

    sc = spark.sparkContext
    path = os.pathsep.join(p for p in sys.path if p)
    if sc.environment.get("PYTHONPATH") != path:
        sc.environment["PYTHONPATH"] = path
    for name in _user_modules(plan):
        module = sys.modules.get(name)
        if module is None or name == "__main__" or _importable_by_name(module):
            continue
        with contextlib.suppress(ValueError):
            cloudpickle.register_pickle_by_value(module)
