"""``SparkRunner``: compiles an application's ``ExecutionPlan`` to PySpark for bounded reprocessing.

How the plan maps onto Spark:

- **Passes.** Stages that share a table run together (the table is state of their task); every
  other stage is a pass of its own. Passes run in the order of the streams between them.
- **Inputs** are read inside executors, one Spark partition per source partition (a JSON Lines
  file split, a Parquet row group, a list partition, a Kafka partition). Parquet and list inputs
  are read straight into Arrow rows (``mapInArrow`` over the source partitions' ids), where an
  RDD's records would cross into the JVM one pickle each.
- **A lone ``partition_by``** (a pass that only re-keys a Parquet input whose rows are its
  messages, into a stream whose readers read nothing else) carries the input's columns through
  the shuffle as they were read, with the key pickled beside them; the reading pass builds each
  message from the columns with the input's serde (``_Compiler._carry``).
- **Narrow passes** (no intermediate input, and no window, join or table unless one input
  feeds the pass in as many partitions as its source has) run each source partition through the
  stages' operators where it was read: no shuffle.
- **Every other pass** gets its records by a shuffle into the pass's task partitions: an
  intermediate stream's records go to the partition the streaming runtime would write them to
  (murmur2 of the serialized key, into the planned count); an input's records stay in their own
  partition; a broadcast stream's go to every task of the job, and to each of its virtual
  tasks with ``job.elasticity.factor`` > 1 (``tiers.broadcast_tasks``). The shuffle and the
  sort are the JVM's (``runtime.spark.shuffle``): records are
  rows, repartitioned so that task partition p is Spark partition p and sorted within it by
  (event time, source partition, source offset); ``mapInArrow`` then feeds the sorted rows, an
  Arrow batch at a time, through the same operator code as the streaming runtime
  (``runtime.spark.executor``, ``PassExecutor.feed``/``finish``). A narrow pass with a window,
  join or table is sorted the same way where it was read. No Python process holds a task
  partition: memory grows with a batch and the operators' state, not with the input.
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

import collections
import contextlib
import dataclasses
import functools
import itertools
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

from operators.hashing import KeyPartitioner
from planner import refuse_processing_time_joins, refuse_remote_tables
from runtime.engine.collector import messages_die_young
from runtime.engine.job import task_name
from runtime.engine.late import LateCounts
from runtime.memory import resolve_partitions
from runtime.spark.declared import (
    GENERAL_TIER,
    SQL_TIER,
    DeclaredWindow,
    arrow_reason,
    build_declared,
    build_declared_arrow,
    declared_windows,
    sql_reason,
)
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
from runtime.spark.ship import ship_user_code
from runtime.spark.shuffle import (
    BATCH,
    FLAT,
    OFFSET_ORDER,
    ORDER,
    SCHEMA,
    PassOutput,
    Records,
    ShuffleCodec,
    broadcast_rows,
    carried_batch,
    carried_columns,
    chunks,
    identity,
    key_type,
    narrow_shuffle,
    record_message,
    record_partition,
    record_stream,
    records_of,
    shuffle,
    to_batch,
)
from runtime.spark.sinks import FileOutput, resolve_output, text_lines
from runtime.spark.sources import WIDE_BATCH, FileInput, Source, SourceError, resolve_source
from runtime.spark.sqltext import struct_type
from runtime.spark.tiers import (
    broadcast_tasks,
    carried_streams,
    key_field,
    message_fields,
    spark_passes,
)
from samza_dsl import StreamApplication
from samza_dsl.errors import SamzaError
from samza_dsl.fields import field_path
from samza_dsl.jobconfig import job_config
from samza_dsl.serdes import KVSerde
from samza_dsl.spec import JoinSpec, PartitionBySpec, SendToSpec, WindowSpec
from samza_dsl.stream import OutputStream
from samza_dsl.systems import StreamDescriptor

__all__ = ["SparkRunner", "ReprocessResult", "ReprocessError", "spark_session",
           "session_settings"]



def _first_of(streams: list[str], order: Sequence[str]) -> list[Any]:
    """The sort columns ``order`` with the records of ``streams`` before every other record."""
    if not streams:
        return list(order)
    from pyspark.sql import functions as F  # noqa: N812

    return [(~F.col("sid").isin(streams)).alias("_later"), *order]


_OP = "op:"  # accumulator keys of operator meters: op:<op id>|<metric>


class ReprocessError(SamzaError):
    """A reprocessing run failed; nothing was written.

    Example:
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> app, mem = StreamApplication("div"), MemorySystem()
        >>> nums = mem.input("n")
        >>> app.input(nums).map(lambda n: 1 // n, name="invert").send_to(app.output(mem.output("out")))
        >>> try:
        ...     SparkRunner(spark_session("local[2]")).reprocess(app, {"n": [1, 0]})
        ... except ReprocessError as e:
        ...     print(e)
        operator 'div-1-map-invert' failed ... ZeroDivisionError: integer division or modulo by zero...
    """


def spark_session(master: str | None = None, app_name: str = "samza-dsl",
                  conf: Mapping[str, str] | None = None, *, quiet: bool = True) -> Any:
    """A SparkSession for reprocessing (``spark.ui.enabled`` off; a session already running is
    reused). ``master``: ``local[2]``, ``spark://host:port``...; None is the master
    ``spark-submit --master`` gave, else ``local[2]``. ``conf``: Spark settings, over these
    defaults. ``quiet`` starts the JVM without its start-up warnings and with its log at FATAL
    (``runtime.spark.jvm``); errors are raised.

    Example:
        >>> spark = spark_session("local[2]", conf={"spark.sql.shuffle.partitions": "4"})
        >>> spark.sparkContext.master, spark.conf.get("spark.ui.enabled")
        ('local[2]', 'false')
        >>> spark_session("local[2]") is spark  # the running one is reused
        True"""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    # executors run this interpreter, which has the application's packages (on other hosts:
    # set PYSPARK_PYTHON to the interpreter there, with the same packages installed)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # under spark-submit: its JVM, its master
    if master is None and not submitted:
        master = "local[2]"
    settings = session_settings(master, app_name, conf)
    if quiet:
        from runtime.spark.jvm import start_quietly

        start_quietly(SparkConf().setAll(list(settings.items())))
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


#: where a driver in local mode listens (its RPC and block manager): everything runs on this
#: machine, so nothing needs to reach it from another
LOOPBACK = "127.0.0.1"


def session_settings(master: str | None, app_name: str = "samza-dsl",
                     conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings of ``spark_session``: its defaults, ``conf`` over them. In local mode
    the driver binds to and advertises 127.0.0.1 unless ``conf`` says otherwise: by default
    Spark takes the machine's network address (when the host name resolves to loopback, the
    first other interface's) and listens there, open to the network for a job that needs none.
    Other masters are left as they are: their executors reach the driver over the network.

    >>> s = session_settings("local[2]")
    >>> s["spark.driver.bindAddress"], s["spark.driver.host"]
    ('127.0.0.1', '127.0.0.1')
    >>> "spark.driver.host" in session_settings("spark://10.0.0.5:7077")
    False
    """
    settings = {**({"spark.master": master} if master is not None else {}),
                "spark.app.name": app_name,
                "spark.pyspark.python": os.environ.get("PYSPARK_PYTHON", sys.executable),
                "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": "8",
                # the rows a pass's operators get at once (runtime.spark.shuffle)
                "spark.sql.execution.arrow.maxRecordsPerBatch": str(BATCH), **(conf or {})}
    if "spark.executor.pyspark.memory" in settings:
        # under a limit on its address space, a Python worker reserves no more than it uses:
        # two malloc arenas, and Arrow's buffers from malloc, not a pool that maps ahead
        settings.setdefault("spark.executorEnv.MALLOC_ARENA_MAX", "2")
        settings.setdefault("spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL", "system")
    if master is not None and (master == "local" or master.startswith("local[")):
        settings.setdefault("spark.driver.bindAddress", LOOPBACK)
        settings.setdefault("spark.driver.host", LOOPBACK)
    return settings


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
    ``runtime.engine.late``; ``metrics``: counters summed over every task), and what each operator did.

    ``operators``: ``{op id: {metric: value}}`` for every operator of the plan, in plan order,
    summed over every task, by the names the streaming runtime uses (``runtime.spark.meter``):
    ``messages-in``, ``messages-out``, ``handle-ns`` (nanoseconds in the operator's own
    function, not the operators after it; per-message calls sampled and scaled), and for windows ``panes-emitted`` and
    ``late-messages-dropped`` (``late-messages-sent`` too when it has ``late_to``). The summary
    prints them as a table, one line per operator.

    ``tiers``: ``{stage id: tier}``, the tier each stage ran in: ``"declared (Spark SQL)"`` for
    a declared aggregation run in Spark SQL (``runtime.spark.declared``), else ``"general"``.

    ``columns``: ``{stage id: what it read and moved}`` for each lone ``partition_by`` whose
    input's rows crossed the shuffle as columns: the columns read from the files, the key's
    column where the key was read from one, and the columns carried (the summary prints it).

    Example:
        >>> from samza_dsl import StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> app, mem = StreamApplication("upper"), MemorySystem()
        >>> words = mem.input("words")
        >>> app.input(words).map(str.upper, name="up").send_to(app.output(mem.output("upper")))
        >>> runner = SparkRunner(spark_session("local[2]"))
        >>> result = runner.reprocess(app, {"words": ["a", "b"]})
        >>> result.messages("upper"), result.rows_out, result.late_counts
        (['A', 'B'], {'upper': 2}, {})
        >>> result.operators["upper-1-map-up"]["messages-in"], result.tiers
        (2, {'stage-0': 'general'})
        >>> result.summary().splitlines()[0], result.operator_summary()[1].split()[:2]
        ("reprocessed 'upper-1' in ... s", ['upper-1-map-up', 'map'])
    """

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
        self.tiers: dict[str, str] = {}
        self.columns: dict[str, str] = {}
        #: the rows of inputs with ``max_event_time_ahead`` left out under
        #: ``streams.<id>.samza.serde.error=dead-letter``, as ``samza-dsl dump`` shows dead
        #: letters: ``{"source": "stream/source partition/row", "error", "key", "value"}``
        self.dead_letters: list[dict[str, Any]] = []

    @property
    def outputs(self) -> list[str]:
        return sorted(self.plan.output_streams)

    def messages(self, stream: Any) -> list[Any]:
        """Every message of output ``stream``, collected to the driver (KV for keyed streams).
        An output written to files is read back from them."""
        sid = stream if isinstance(stream, str) else str(
            stream.stream_id if isinstance(stream, StreamDescriptor | OutputStream) else stream)
        if sid in self._kept:
            return list(self._kept[sid].collect())
        out = self.written.get(sid)
        if isinstance(out, FileOutput):
            descriptor = self.plan.streams[sid].descriptor
            src = resolve_source(self._runner.spark, sid, descriptor,
                                 FileInput(out.path, format=out.format), 0)
            return list(src.rdd(self._runner.spark).map(record_message).collect())
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
        for sid in sorted(self.rows_in):
            n = self.metrics.get(f"{sid}.event-time-ahead-skipped", 0)
            if n:
                key = f"streams.{sid}.samza.serde.error"
                policy = self.plan.config.stream(sid).serde_error
                where = ("ReprocessResult.dead_letters holds them" if policy == "dead-letter"
                         else "the first of each Spark task is logged with its row and event "
                         "time")
                lines.append(f"skipped: {n:,} row(s) of {sid} whose event time was too far "
                             f"ahead of the wall clock (max_event_time_ahead; {key}="
                             f"{policy}): not processed; {where}")
        if any(op.opcode == "window" for op in self.plan.app.operators):
            lines.extend(self.late_summary() or ["late: no late messages"])
        lines.extend(self.operator_summary())
        lines.extend(f"  {stage}: {text}" for stage, text in self.columns.items())
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
        master: the master of the session it starts (``local[2]``, ``spark://host:port``);
            None: the one ``spark-submit --master`` gave, else ``local[2]``.
        conf: Spark settings for the session it starts (``spark.executor.memory``...), as
            ``spark-submit --conf`` takes them.

    Example:
        >>> from samza_dsl import KV, StreamApplication
        >>> from samza_dsl.systems import MemorySystem
        >>> app, mem = StreamApplication("lengths"), MemorySystem()
        >>> words = mem.input("words", partitions=2)
        >>> (app.input(words).map(lambda w: KV(w, len(w)), name="length")
        ...  .send_to(app.output(mem.output("lengths"))))
        >>> runner = SparkRunner(master="local[2]")  # Spark starts on first use, quietly
        >>> result = runner.reprocess(app, {"words": ["a", "bb", "ccc"]})  # or paths, FileInput...
        >>> sorted(kv.value for kv in result.messages("lengths")), result.rows_in
        ([1, 2, 3], {'words': 3})
        >>> print(result.summary())
        reprocessed 'lengths-1' in ... s
          stream   kind                  rows  to
          words    input                    3
          lengths  output                   3  (kept)
          operator              kind               in           out          ms      panes  late
          lengths-1-map-length  map                 3             3 ...
          lengths-1-send_to-1   send_to             3             3 ...
        >>> len(result.operator_summary())  # the operator table alone: a header and a line each
        3
        >>> runner.stop()  # stops the session it started
    """

    def __init__(self, spark: Any = None, *, master: str | None = None,
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
        refuse_remote_tables(app.spec(), "SparkRunner")
        refuse_processing_time_joins(app.spec(), "SparkRunner")
        t0 = time.monotonic()
        start_ms = int(time.time() * 1000)
        outputs = dict(outputs or {})
        _check_ids(app, inputs, outputs)
        spark = self.spark
        sc = spark.sparkContext
        given = job_config(app, config)  # a Kafka range logs in with its system's keys
        sources = {sid: resolve_source(spark, sid, app.spec().inputs[sid], value, start_ms,
                                       given)
                   for sid, value in inputs.items()}
        partitions = {sid: s.partitions for sid, s in sources.items()
                      if app.spec().inputs[sid].partitions is None}
        plan = app.plan(partitions=partitions, config=given)
        ship_user_code(spark, plan)
        counts = resolve_partitions(plan)
        elasticity = plan.config.job.elasticity_factor
        for stages in spark_passes(plan):  # what Spark cannot run, refused before it runs
            broadcast_tasks(plan, stages, counts, elasticity)
        run_id = uuid.uuid4().hex[:12]
        sinks = {sid: resolve_output(sid, value, run_id) for sid, value in outputs.items()}
        for sink in sinks.values():
            sink.prepare(plan, counts)

        tally = _Counts(sc)
        dead = _arm_ahead(sc, plan, sources, tally.acc)
        read = {sid for stage in plan.stages for sid in stage.inputs}
        encoded = frozenset(sid for sid, sink in sinks.items()
                            if sink.format == "jsonl" and sid not in read)
        compiled = _Compiler(spark, plan, counts, sources, tally.acc, encoded, elasticity)
        kept: dict[str, Any] = {}
        staged: list[Any] = []
        doing = "planning the Spark job"
        with _pass_settings(spark):
            try:
                ends = compiled.build()
                for sid in sorted(plan.output_streams):
                    doing = f"computing output {sid!r} ({compiled.labels.get(sid, 'no pass')})"
                    _write_output(compiled, sid, sinks, kept, staged)
                for end in ends:  # passes nothing reads yet (sinks, tables): run them too
                    doing = f"running {end.name}"
                    sc.setJobDescription(f"samza-dsl {plan.job_name}: run {end.name}")
                    with _call_site(sc, end.shuffled):
                        end.run()
                for sink in staged:
                    sink.commit(spark)
            except Exception as exc:
                for sink in staged:
                    sink.abort(spark)
                for rdd in kept.values():
                    rdd.unpersist()
                raise _reprocess_error(plan, exc, doing) from None
            finally:
                sc.setJobDescription(None)
                compiled.release()
        result = _result(self, plan, compiled, dict(tally.acc.value), kept, sinks,
                         time.monotonic() - t0)
        if dead is not None:
            result.dead_letters = sorted(dead.value, key=_source_order)
        return result

    def stop(self) -> None:
        if self._spark is not None:
            self._spark.stop()
            self._spark = None


#: Spark SQL settings a run's passes take where the session sets none of its own. With a byte
#: limit on the Arrow batches it hands to Python (``maxBytesPerBatch``), Spark 4 measures the
#: batch after every row it adds, which costs more than converting the row; at the largest value
#: it does not, and a batch is bounded by its rows (``maxRecordsPerBatch``).
PASS_SQL_CONF = {"spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1)}


@contextlib.contextmanager
def _pass_settings(spark: Any) -> Iterator[None]:
    """``PASS_SQL_CONF`` set in ``spark``'s session for the run where it has no value of its
    own, and unset after."""
    conf = spark.conf
    added = [key for key in PASS_SQL_CONF if conf.get(key, None) is None]
    for key in added:
        conf.set(key, PASS_SQL_CONF[key])
    try:
        yield
    finally:
        for key in added:
            conf.unset(key)


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
            if window:  # its outputs are its panes and the late messages it sent
                sent = metrics.get(f"{op_id}.{LATE_SENT}", 0)
                m[PANES_EMITTED] = m[MESSAGES_OUT] - sent
                m[LATE_DROPPED] = metrics.get(f"{op_id}.{LATE_DROPPED}", 0)
                if isinstance(spec, WindowSpec) and spec.late_to is not None:
                    m[LATE_SENT] = sent
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


def _reprocess_error(plan: Any, exc: BaseException, doing: str = "") -> BaseException:
    """One line for a failed run: the executor's own words when a pass said what failed
    (``PassFailure``), else the cause Spark reports (a Python exception, a worker that crashed
    or ran out of memory), with what the run was doing (the output and the pass computing it)."""
    if isinstance(exc, SamzaError):
        return exc
    text = str(exc)
    found = re.search(re.escape(PassFailure.MARK) + r"(.*)", text)
    if found:
        return ReprocessError(found.group(1).strip())
    causes = re.findall(r"^(\w+(?:\.\w+)*(?:Error|Exception|Exit)\b(?::? .*)?)\s*$", text,
                        re.M)
    causes = [c for c in causes if not c.startswith(("org.", "java.", "py4j."))]
    crashed = re.search(r"Python worker exited unexpectedly[^\n]*", text)
    first = causes[-1] if causes else crashed.group(0) if crashed else next(
        (ln for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    hint = ""
    if "MemoryError" in first or "OutOfMemory" in text or crashed:
        hint = ("; the Python worker ran out of memory or crashed: give it more "
                "(spark.executor.pyspark.memory, spark.executor.memory) or the streams more "
                "partitions")
    during = f" while {doing}" if doing else ""
    return ReprocessError(f"reprocessing {plan.job_name!r} failed in Spark{during}: "
                          f"{first.strip()[:500]}{hint}")


# -- compiling the plan ----------------------------------------------------------------------------

class _Compiler:
    """Builds each pass: a ``PassOutput`` of ``(target partition, record)`` for everything it
    writes (``runtime.spark.shuffle``)."""

    def __init__(self, spark: Any, plan: Any, counts: dict[str, int],
                 sources: dict[str, Source], acc: Any,
                 encoded: frozenset[str] = frozenset(), elasticity: int = 1) -> None:
        self.spark = spark
        #: ``job.elasticity.factor``: every virtual task reads a broadcast stream whole
        self.elasticity = elasticity
        #: JSON Lines outputs whose passes write each message as its line (``Encoded``)
        self.encoded = encoded
        self.sc = spark.sparkContext
        self.plan = plan
        self.counts = counts
        self.sources = sources
        self.acc = acc
        #: how the passes write the messages they hand each other (data, never code)
        self.codec = ShuffleCodec(plan)
        self.out: dict[str, PassOutput] = {}  # stream id -> the pass that writes it
        self.persisted: list[PassOutput] = []
        self.labels: dict[str, str] = {}  # stream id -> what the pass writing it does
        #: stream id -> the name of the shuffle's map side before the pass writing it
        self.shuffled: dict[str, str] = {}
        #: stage id -> the tier it ran in (``runtime.spark.declared``)
        self.tiers: dict[str, str] = {}
        self.frames: dict[str, Any] = {}  # window stage id -> the input DataFrame it aggregates
        self.arrow: dict[str, Any] = {}  # window stage id -> the Parquet source it reads itself
        #: intermediate streams whose readers read nothing else: a lone ``partition_by`` may
        #: carry its input's rows into them as columns (``_carry``)
        self.may_carry: set[str] = set()
        #: stream id -> how its carried rows become messages (row -> message)
        self.carried: dict[str, Callable[[Any], Any]] = {}
        #: carried stream id -> the fields carried (None: all), and the field its key is made
        #: of where the key function only reads one (``planner.fields``)
        self.carried_fields: dict[str, list[str] | None] = {}
        self.key_fields: dict[str, str | None] = {}
        #: carried streams whose records' clock is their sort ms: the shuffle moves neither
        #: the clock nor the (null) message bytes (``records_of``)
        self.same_clock: set[str] = set()
        #: stage id -> what a carried pass reads and moves (``ReprocessResult.columns``)
        self.columns: dict[str, str] = {}

    def build(self) -> list[PassOutput]:
        """Build every pass; returns the passes whose outputs nothing consumes (a pass with
        only sinks or tables), which must still be run."""
        plan = self.plan
        consumers: dict[str, int] = {}
        for s in plan.stages:
            for sid in s.inputs:
                consumers[sid] = consumers.get(sid, 0) + 1
        for sid in plan.output_streams:
            consumers[sid] = consumers.get(sid, 0) + 1
        ends = []
        fused = self._declared()
        passes = spark_passes(plan)
        self.may_carry = carried_streams(plan, passes)
        for stages in passes:
            ids = [s.stage_id for s in stages]
            d = fused.get(ids[0]) if len(ids) == 1 else None
            for sid in ids:
                self.tiers[sid] = SQL_TIER if sid in fused else GENERAL_TIER
            if d is not None and d.partition_stage == ids[0]:
                continue  # run with its window's pass, in Spark SQL
            out = self._pass(stages) if d is None else self._declared_pass(d)
            written = set(itertools.chain.from_iterable(s.outputs for s in stages))
            if sum(consumers.get(sid, 0) for sid in written) > 1:
                out.persist()
                self.persisted.append(out)
            for sid in written:
                self.out[sid] = out
                if out.shuffled is not None:
                    self.shuffled[sid] = out.shuffled
            if not any(consumers.get(sid, 0) for sid in written):
                ends.append(out)
        return ends

    def _declared(self) -> dict[str, DeclaredWindow]:
        """The declared windows this run computes in Spark SQL, by both their stage ids: those
        the plan allows (``declared_windows``) whose input's columns allow it too: Parquet
        files read with Arrow (``arrow_reason``; files it cannot take are read row by row, as
        the general tier reads them), a DataFrame in Spark SQL (``sql_reason``)."""
        found, _ = declared_windows(self.plan)
        out: dict[str, DeclaredWindow] = {}
        for d in found.values():
            source = self.sources[d.input]
            if source.file_schemas is not None:  # Parquet files: read with Arrow, or as rows
                if not arrow_reason(d, self.plan, source):
                    self.arrow[d.window_stage] = source
                    out[d.partition_stage] = out[d.window_stage] = d
                continue
            frame = source.frame(self.spark)
            if frame is None:
                continue
            if not sql_reason(d, self.plan, frame):
                self.frames[d.window_stage] = frame
                out[d.partition_stage] = out[d.window_stage] = d
        return out

    def _declared_pass(self, d: DeclaredWindow) -> PassOutput:
        acc = self.acc

        def tally(ex: PassExecutor, extra: dict[str, int]) -> None:
            acc.add(_tally(ex, extra))
        build = build_declared_arrow if d.window_stage in self.arrow else build_declared
        given = self.arrow.get(d.window_stage) or self.frames[d.window_stage]
        out = build(self.spark, self.plan, d, given, self.counts[d.stream], self.counts, tally,
                    self.encoded, self.codec)
        out.shuffled = f"{STAGE_PREFIX}{self.plan.job_name}: {d.partition_stage}+" \
                       f"{d.window_stage} ({SQL_TIER})"
        for stage in self.plan.stages:
            if stage.stage_id == d.window_stage:
                for sid in stage.outputs:
                    self.labels[sid] = out.name
        return out

    def release(self) -> None:
        for out in self.persisted:
            out.unpersist()

    def messages(self, sid: str) -> Any:
        """The messages of output ``sid``."""
        out = self.out.get(sid)
        if out is None:
            return self.sc.emptyRDD()
        return out.messages(sid)

    def _pass(self, stages: list[Any]) -> PassOutput:
        """The pass of ``stages``: its shape (``_PassShape``) built by the first strategy of
        ``PASS_STRATEGIES`` whose condition the shape meets (the last takes every pass)."""
        shape = self._shape(stages)
        for strategy in PASS_STRATEGIES:
            if strategy.when(shape):
                return strategy.build(self, shape)
        raise AssertionError(f"no strategy runs pass {shape.name}")  # (the last takes all)

    def _shape(self, stages: list[Any]) -> _PassShape:
        """What the strategies of a pass of ``stages`` choose by and build from; names the
        streams the pass writes by what it does (``labels``)."""
        plan, counts = self.plan, self.counts
        stage_ids = [s.stage_id for s in stages]
        inputs = list(dict.fromkeys(itertools.chain.from_iterable(s.inputs for s in stages)))
        external = [sid for sid in inputs if sid in plan.input_streams]
        intermediate = [sid for sid in inputs if sid not in plan.input_streams]
        stateful = any(isinstance(plan.app.operator(op), WindowSpec | JoinSpec)
                       for s in stages for op in s.operators) \
            or any(s.tables_read or s.tables_written for s in stages)
        name = "+".join(stage_ids)
        label = (f"{name}: {', '.join(inputs)} -> "
                 f"{', '.join(dict.fromkeys(o for s in stages for o in s.outputs))}")
        for s in stages:  # (a pass never reads what it writes)
            for sid in s.outputs:
                self.labels[sid] = label
        first_op = next((op for s in stages for op in s.operators), "")
        # a broadcast stream is read whole by every task of the job (each virtual task)
        everywhere = broadcast_tasks(plan, stages, counts, self.elasticity)
        virtual = self.elasticity if everywhere is not None else 1
        task = _PassTask(
            plan, stage_ids, counts, self.encoded, self.acc,
            {sid: src.names for sid, src in self.sources.items()},
            f"stream {', '.join(map(repr, inputs))} into operator {first_op!r} (pass {name})",
            virtual)
        aligned = all(self.sources[sid].partitions == counts[sid] for sid in external)
        narrow = not intermediate and (not stateful or (len(external) == 1 and aligned))
        # bootstrap inputs (side inputs too) are read whole before the pass's other records
        first = sorted(sid for sid in external if plan.app.inputs[sid].bootstrap)
        narrow_sorted = narrow and (stateful or bool(first))
        return _PassShape(
            stages=stages, name=name, inputs=inputs, external=external,
            n=everywhere or max(counts[sid] for sid in inputs), first=first, narrow=narrow,
            narrow_sorted=narrow_sorted,
            read=all(self.sources[sid].read for sid in external),
            carry=self._carry(stages) if narrow and not narrow_sorted else None,
            carried={sid: self.carried[sid] for sid in intermediate if sid in self.carried},
            task=task)

    def _keyed_input(self, sid: str, n: int) -> Any:
        """Stream ``sid`` as rows bound for the pass's task partitions (column ``p``)."""
        plan, counts, codec = self.plan, self.counts, self.codec
        if sid in plan.input_streams:
            src = self.sources[sid]
            if src.read is not None:
                return self._read_arrow(sid, _placing(plan, sid, src.partitions, counts[sid]))
            rdd = src.rdd(self.spark)
            if src.partitions == counts[sid]:
                placed = rdd.map(_in_own_partition)
            else:
                # the input declares another count than its source has: a keyed record goes to
                # its key's partition (as Kafka's default partitioner), any other stays in its
                # own
                serde = plan.streams[sid].descriptor.serde
                m = counts[sid]
                if not isinstance(serde, KVSerde):
                    placed = rdd.map(lambda rec: (record_partition(rec) % m, rec))
                else:
                    key_bytes = serde.key_serde.serialize

                    def place_keyed(it: Any) -> Any:
                        partitioner = KeyPartitioner(m, key_bytes)
                        for rec in it:
                            yield partitioner(record_message(rec).key), rec
                    placed = rdd.mapPartitions(place_keyed)
            return PassOutput(self.spark, codec, f"read {sid}", rdd=placed).rows()
        rows = self.out[sid].rows([sid])
        if plan.streams[sid].kind == "broadcast":
            return broadcast_rows(rows, n, ALL_PARTITIONS)
        return rows


    def _carry(self, stages: list[Any]) -> tuple[str, Any, Any, list[str] | None] | None:
        """For a narrow pass that is a lone ``partition_by`` (no value function) of an input
        whose rows are its messages and survive Spark's types unchanged, into a stream whose
        readers read nothing else: (that stream, the pass's Spark schema, its Arrow schema,
        the fields carried or None for all): ``shuffle.carried_columns`` and a column per field
        of the input's rows (``row__<field>``); only the fields the stream's readers read
        (``_carried_fields``). Else None."""
        plan = self.plan
        if len(stages) != 1 or len(stages[0].operators) != 1 or len(stages[0].inputs) != 1:
            return None
        spec = plan.app.operator(stages[0].operators[0])
        sid = stages[0].inputs[0]
        src = self.sources.get(sid)
        if not isinstance(spec, PartitionBySpec) or spec.value_fn is not None or src is None \
                or src.columns is None or spec.stream_id not in self.may_carry:
            return None
        import pyarrow as pa
        from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
        from pyspark.sql.types import StructField, StructType, _parse_datatype_string

        fields = self._carried_fields(spec.stream_id, src.columns.names) \
            if src.convert is identity else None
        columns = src.columns if fields is None \
            else pa.schema([src.columns.field(f) for f in fields])
        try:
            row_type = from_arrow_schema(columns, prefer_timestamp_ntz=True)
            if to_arrow_schema(row_type) != columns:
                return None  # Spark would hand the rows back as other types
            if any("." in f.name or "`" in f.name for f in row_type.fields):
                return None  # (names Spark would read as paths)
            head = carried_columns(src.same_clock,
                                   key_type(src.columns, self._key_field(stages[0], src)))
            spark_schema = StructType([
                *cast(StructType, _parse_datatype_string(head)).fields,
                *(StructField(FLAT + f.name, f.dataType, f.nullable) for f in row_type.fields)])
            return spec.stream_id, spark_schema, to_arrow_schema(spark_schema), fields
        except Exception:  # a type Spark has no Arrow form for: the messages go as bytes
            return None

    def _key_field(self, stage: Any, src: Source) -> str | None:
        """The field the key function of a pass's lone ``partition_by`` reads, where that is
        all it does and the input's rows have it (``planner.tiers.key_field``), else None."""
        name = key_field(self.plan.app.operator(stage.operators[0]).key_fn)
        return name if name is not None and src.convert is identity \
            and name in src.columns.names else None

    def _carried_fields(self, sid: str, names: Sequence[str]) -> list[str] | None:
        """The fields of the rows carried into stream ``sid`` (a dict a row, its fields
        ``names``) that the stream's readers may read (``planner.tiers.message_fields``), in
        the rows' order; None where they may read more, or every field."""
        need = message_fields(self.plan, sid)
        if need is None or not need <= set(names) or len(need) == len(names):
            return None
        return [f for f in names if f in need]

    def _read_arrow(self, sid: str, run: Callable[[int, Iterator[Any]], Iterator[list[Any]]]
                    ) -> Any:
        """Input ``sid`` read in executors straight into a DataFrame of ``SCHEMA`` rows, Spark
        partition i holding source partition i: ``run(i, records)`` turns the records of source
        partition i into batches of ``(p, record)`` items."""
        src = self.sources[sid]
        read = src.read
        codec = self.codec
        assert read is not None

        def split(batches: Iterator[Any]) -> Iterator[Any]:
            for b in batches:
                for i in b.column(0).to_pylist():
                    for out in run(i, read(i)):
                        if out:
                            yield to_batch(codec, out)
        return self.spark.range(0, src.partitions, 1, src.partitions).mapInArrow(
            split, struct_type(SCHEMA))


# -- the pass strategies ---------------------------------------------------------------------------

class _PassTask:
    """What a pass's Spark tasks run, shipped to the workers with them (no Spark in it): the
    stages over the record batches of a task partition, and what each task adds to the run's
    accumulator."""

    def __init__(self, plan: Any, stage_ids: list[str], counts: dict[str, int],
                 encoded: frozenset[str], acc: Any, names: dict[str, Any], where: str,
                 virtual: int = 1) -> None:
        self.plan = plan
        self.stage_ids = stage_ids
        self.counts = counts
        self.encoded = encoded
        self.acc = acc
        #: stream id -> its source partitions' names (files), for an error
        self.names = names
        #: the pass in words, for an error
        self.where = where
        #: task partitions per task: a pass reading a broadcast stream runs each virtual
        #: task, task partition ``p`` being virtual task ``p % virtual`` of partition
        #: ``p // virtual``
        self.virtual = virtual
        self.input_streams = frozenset(plan.input_streams)

    def describe(self, sid: str, part: int, off: int) -> str:
        files = self.names.get(sid)
        if files is not None and 0 <= part < len(files):
            return f"{files[part]}, row {off}"
        return f"partition {part}, offset {off}"

    def executor(self, part: int, narrow: bool, encoded: bool = True) -> PassExecutor:
        x = self.virtual
        return PassExecutor(self.plan, self.stage_ids, part // x, self.counts, self.plan.config,
                            describe=self.describe, narrow=narrow,
                            encoded=self.encoded if encoded else frozenset(),
                            task_name=task_name(part // x, part % x, x))

    def tally(self, ex: PassExecutor, extra: dict[str, int]) -> None:
        self.acc.add(_tally(ex, extra))

    def run(self, part: int, batches: Iterator[Sequence[Any]], narrow: bool
            ) -> Iterator[list[Any]]:
        """Run the stages over the record batches of task partition ``part``; yields what
        they write, batch by batch; at the end adds the task's counts to the accumulator."""
        try:
            with messages_die_young():
                ex = self.executor(part, narrow)
                read: collections.Counter[str] = collections.Counter()
                for recs in batches:
                    if type(recs) is Records:
                        read.update(recs.counts())
                    else:
                        read.update(map(record_stream, recs))
                    out = ex.feed(recs)
                    if out:
                        yield out
                yield from ex.finish_chunks()
        except PassFailure:
            raise
        except Exception as exc:
            raise _pass_failure(self.where, part, exc) from exc
        self.tally(ex, {"in:" + sid: k for sid, k in read.items() if sid in self.input_streams})


@dataclasses.dataclass(frozen=True)
class _PassShape:
    """What decides how a pass runs: its stages, inputs (``external``: the application's),
    task partitions (``n``), bootstrap inputs read first (``first``); ``narrow``: no shuffle
    (no intermediate input, and no state unless one input feeds the pass in its source's
    partitions), ``narrow_sorted``: narrow, with each partition sorted where it was read;
    ``read``: every input is read straight into Arrow rows; ``carry``: a lone
    ``partition_by`` that carries its input's columns (``_Compiler._carry``); ``carried``:
    intermediate inputs carried so, with how their rows become messages."""

    stages: list[Any]
    name: str
    inputs: list[str]
    external: list[str]
    n: int
    first: list[str]
    narrow: bool
    narrow_sorted: bool
    read: bool
    carry: tuple[str, Any, Any, list[str] | None] | None
    carried: dict[str, Callable[[Any], Any]]
    task: _PassTask


@dataclasses.dataclass(frozen=True)
class PassStrategy:
    """A way to run a pass: its ``name``, the condition a pass's shape meets for it
    (``when``), and the build of the pass's output (``build``)."""

    name: str
    when: Callable[[_PassShape], bool]
    build: Callable[[_Compiler, _PassShape], PassOutput]


#: the ways to run a pass, in the order they are tried: the first whose condition a pass meets
#: builds it (the last takes every pass)
PASS_STRATEGIES: list[PassStrategy] = []


def _strategy(name: str, when: Callable[[_PassShape], bool]
              ) -> Callable[[Callable[[_Compiler, _PassShape], PassOutput]],
                            Callable[[_Compiler, _PassShape], PassOutput]]:
    """Registers the decorated build in ``PASS_STRATEGIES`` as ``name``, with condition
    ``when``."""
    def register(build: Callable[[_Compiler, _PassShape], PassOutput]
                 ) -> Callable[[_Compiler, _PassShape], PassOutput]:
        PASS_STRATEGIES.append(PassStrategy(name, when, build))
        return build
    return register


@_strategy("carried", lambda p: p.carry is not None)
def _carried_pass(c: _Compiler, p: _PassShape) -> PassOutput:
    """A lone ``partition_by`` of a Parquet input: the input's rows keyed and placed, carried
    through as they were read (``PassExecutor.rekey``: one loop a batch)."""
    assert p.carry is not None
    plan, codec, task = c.plan, c.codec, p.task
    out_sid, spark_schema, arrow_schema, fields = p.carry
    in_sid = p.external[0]
    src = c.sources[in_sid]
    arrow_batches, row_columns = src.arrow_batches, src.row_columns
    assert arrow_batches is not None and row_columns is not None and src.convert is not None
    c.carried[out_sid] = src.convert
    key_field = c._key_field(p.stages[0], src)
    c.carried_fields[out_sid], c.key_fields[out_sid] = fields, key_field
    if src.same_clock:
        c.same_clock.add(out_sid)
    by_column = src.column_times if key_field is not None else None
    # the key and the time are fields, and the readers read known fields: the input's other
    # columns are never read
    time_path = field_path(plan.app.inputs[in_sid].event_time)
    read_only = None if by_column is None or fields is None else \
        list(dict.fromkeys([key_field, *fields, *(q[1] for q in time_path or ())]))
    every = list(src.columns.names)
    c.columns[p.name] = (
        f"read {', '.join(read_only or every)} of {in_sid}"
        + (f"; key from column {key_field}" if by_column is not None else "")
        + f"; carried {', '.join(fields or every)}")

    def rekeyed(ex: PassExecutor, i: int, rows: Any, first: int) -> Any:
        """The batch's records as ``PassExecutor.rekey`` gives them: from its columns where
        the key and the event time are fields, else from its rows."""
        if by_column is not None:
            cols = by_column(rows, first)
            if cols is not None:
                out = ex.rekey_column(rows.column(key_field), cols)
                if out is not None:
                    return out
        return ex.rekey(in_sid, i, row_columns(i, rows.to_pylist(), first))

    def run_carried(batches: Iterator[Any]) -> Iterator[Any]:
        """mapInArrow over the split ids: each split's rows, a batch at a time."""
        for b in batches:
            for i in b.column(0).to_pylist():
                try:
                    with messages_die_young():
                        ex = task.executor(i, True, encoded=False)
                        read = 0
                        for rows, first in arrow_batches(i, read_only, WIDE_BATCH):
                            read += rows.num_rows
                            yield carried_batch(codec, i, out_sid, rekeyed(ex, i, rows, first),
                                                rows if fields is None else rows.select(fields),
                                                arrow_schema)
                        ex.finish()
                except PassFailure:
                    raise
                except Exception as exc:
                    raise _pass_failure(task.where, i, exc) from exc
                task.tally(ex, {"in:" + in_sid: read})
    n_in = src.partitions
    # a task reads several splits in turn (what it writes is shuffled after): each task costs
    # its Python worker the pass's code to load, tens of ms
    tasks = min(n_in, max(1, 2 * c.sc.defaultParallelism))
    df = c.spark.range(0, n_in, 1, tasks).mapInArrow(run_carried, spark_schema)
    return PassOutput(c.spark, codec, f"pass {p.name}", df=df, only=out_sid)


@_strategy("narrow-arrow", lambda p: p.narrow and not p.narrow_sorted and p.read)
def _narrow_arrow_pass(c: _Compiler, p: _PassShape) -> PassOutput:
    """Each source partition run where it was read, as it is read into Arrow rows."""
    task = p.task

    def run_split(i: int, recs: Iterator[Any]) -> Iterator[list[Any]]:
        batches = chunks(recs)
        first = next(batches, None)
        if first is not None:
            yield from task.run(i, itertools.chain([first], batches), True)
    frames = [c._read_arrow(sid, run_split) for sid in p.external]
    df = functools.reduce(lambda a, b: a.union(b), frames)
    return PassOutput(c.spark, c.codec, f"pass {p.name}", df=df)


@_strategy("narrow", lambda p: p.narrow and not p.narrow_sorted)
def _narrow_pass(c: _Compiler, p: _PassShape) -> PassOutput:
    """Each source partition run where it was read, as it is read (an RDD's records)."""
    task = p.task
    rdds = [c.sources[sid].rdd(c.spark) for sid in p.external]
    union = rdds[0] if len(rdds) == 1 else c.sc.union(rdds)

    def run_read(it: Iterator[Any]) -> Iterator[Any]:
        batches = chunks(it)
        first = next(batches, None)
        if first is None:
            return
        for out in task.run(first[0][2], itertools.chain([first], batches), True):
            yield from out
    rdd = union.mapPartitions(run_read)
    rdd.setName(f"pass {p.name}")
    return PassOutput(c.spark, c.codec, f"pass {p.name}", rdd=rdd)


@_strategy("narrow-sorted", lambda p: p.narrow_sorted)
def _narrow_sorted_pass(c: _Compiler, p: _PassShape) -> PassOutput:
    """One input, a Spark partition per source partition: sorted where it was read, in
    offset order where a window moves its watermark per record."""
    sid = p.external[0]
    src = c.sources[sid]
    if src.read is not None:
        rows = c._read_arrow(sid, _in_own_partitions)
    else:
        rows = PassOutput(c.spark, c.codec, f"read {sid}",
                          rdd=src.rdd(c.spark).map(_in_own_partition)).rows()
    order = OFFSET_ORDER if any(per_message_windows(c.plan, s) for s in p.stages) else ORDER
    return _sorted_pass(c, p, rows.sortWithinPartitions(*_first_of(p.first, order)), None)


@_strategy("shuffled", lambda p: len(p.inputs) == 1)
def _shuffled_pass(c: _Compiler, p: _PassShape) -> PassOutput:
    """Rows of one stream into the pass's task partitions: narrower through the JVM."""
    sid = p.inputs[0]
    rows = c._keyed_input(sid, p.n)
    if sid in c.same_clock:
        rows = rows.drop("clock", "m")
    return _sorted_pass(c, p, narrow_shuffle(c.spark, rows, p.n, ORDER), sid)


@_strategy("shuffled-union", lambda p: True)
def _union_pass(c: _Compiler, p: _PassShape) -> PassOutput:
    """The rows of every input, shuffled into the pass's task partitions together."""
    union = functools.reduce(lambda a, b: a.union(b),
                             [c._keyed_input(sid, p.n) for sid in p.inputs])
    return _sorted_pass(c, p, shuffle(c.spark, union, p.n, _first_of(p.first, ORDER)), None)


def _sorted_pass(c: _Compiler, p: _PassShape, sorted_rows: Any, only: str | None
                 ) -> PassOutput:
    """The pass over ``sorted_rows`` (each task partition's rows in a Spark partition, in
    order; ``only``: the stream of every row, where rows come without it)."""
    codec, task, carried, narrow_sorted = c.codec, p.task, p.carried, p.narrow_sorted

    def run_sorted(batches: Iterator[Any]) -> Iterator[Any]:
        """mapInArrow: the sorted rows of one task partition (its Spark partition)."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        decoded = (records_of(codec, b, carried, only) for b in batches if b.num_rows)
        for out in task.run(part, decoded, narrow_sorted):
            yield to_batch(codec, out)

    df = sorted_rows.mapInArrow(run_sorted, struct_type(SCHEMA))
    out = PassOutput(c.spark, codec, f"pass {p.name}", df=df)
    if not p.narrow:  # the map side of this shuffle: named by what it computes
        made = dict.fromkeys(c.labels.get(sid, f"read {sid}") for sid in p.inputs)
        out.shuffled = f"{STAGE_PREFIX}{c.plan.job_name}: {'; '.join(made)}"
    return out


def _chosen(plan: Any, sid: str) -> bool:
    """Whether a ``send_to`` of output ``sid`` chooses its messages' partitions."""
    return any(isinstance(op, SendToSpec) and op.stream_id == sid and op.placement is not None
               for op in plan.app.operators)


def _write_output(compiled: _Compiler, sid: str, sinks: dict[str, Any], kept: dict[str, Any],
                  staged: list[Any]) -> None:
    """Compute output ``sid`` of the run: staged into its sink (``staged``), or kept for
    ``ReprocessResult.messages`` (``kept``)."""
    spark, plan, encoded = compiled.spark, compiled.plan, compiled.encoded
    sc = spark.sparkContext
    sc.setJobDescription(f"samza-dsl {plan.job_name}: write {sid} to {sinks[sid]}"
                         if sid in sinks else
                         f"samza-dsl {plan.job_name}: compute {sid}")
    # the shuffles before it run now (adaptive execution plans stage by stage): their stages
    # are named by what their map side computes
    out = compiled.out.get(sid)
    if sid in encoded and out is not None and out.df is not None:
        # the pass wrote the lines: the JVM writes its rows, no Python step
        staged.append(sinks[sid])
        if out.partitions is not None:  # written as they are, in one action
            site = compiled.shuffled.get(sid)  # its stages: the pass and the write
            with _call_site(sc, site and f"{site}, write {sid} to {sinks[sid]}"):
                sinks[sid].stage(spark, None, text_lines(out.rows([sid]), False),
                                 out.partitions)
            return
        with _call_site(sc, compiled.shuffled.get(sid)):
            lines = text_lines(out.rows([sid]))
        sinks[sid].stage(spark, None, lines)
        return
    if sid in sinks and sinks[sid].placed and _chosen(plan, sid):
        # a send_to chooses the partitions: the sink writes each message where it was placed
        out = compiled.out.get(sid)
        with _call_site(sc, compiled.shuffled.get(sid)):
            items = (sc.emptyRDD() if out is None
                     else out.items([sid]).map(lambda item: (item[0], item[1][5])))
        staged.append(sinks[sid])
        sinks[sid].stage(spark, items, placed=True)
        return
    with _call_site(sc, compiled.shuffled.get(sid)):
        rdd = compiled.messages(sid)
    if sid in sinks:
        staged.append(sinks[sid])
        sinks[sid].stage(spark, rdd)
    else:
        kept[sid] = rdd.persist()
        rdd.count()


def _arm_ahead(sc: Any, plan: Any, sources: Mapping[str, Source], counts: Any) -> Any:
    """Give each input's ``max_event_time_ahead`` check (``runtime.spark.ahead``) its stream's
    serde error policy and the run's accumulators; the dead-letter accumulator, or None where
    no input has a check."""
    from runtime.engine.codec import serde_error_policy
    from runtime.spark.ahead import dead_letter_accumulator

    checks = {sid: src.ahead for sid, src in sources.items() if src.ahead is not None}
    if not checks:
        return None
    dead = dead_letter_accumulator(sc)
    for sid, check in checks.items():
        check.arm(serde_error_policy(plan.config, sid), counts, dead)
    return dead


def _source_order(letter: Mapping[str, Any]) -> tuple[str, int, int]:
    sid, part, row = str(letter["source"]).rsplit("/", 2)
    return sid, int(part), int(row)


def _result(runner: SparkRunner, plan: Any, compiled: _Compiler, counted: dict[str, int],
            kept: dict[str, Any], sinks: dict[str, Any], seconds: float) -> ReprocessResult:
    """The ``ReprocessResult`` of a run whose accumulator summed ``counted``."""
    rows_in = {sid: counted.get("in:" + sid, 0) for sid in plan.input_streams}
    rows_out = {sid: counted.get("out:" + sid, 0)
                for sid in (*plan.output_streams, *plan.intermediate_streams)}
    metrics = {k[len("metric:"):]: v for k, v in counted.items() if k.startswith("metric:")}
    result = ReprocessResult(runner, plan, rows_in, rows_out, seconds, kept,
                             {sid: sinks[sid] for sid in sinks}, metrics,
                             _operator_metrics(plan, counted, metrics))
    result.tiers = dict(compiled.tiers)
    result.columns = dict(compiled.columns)
    return result


def _pass_failure(where: str, part: int, exc: BaseException) -> PassFailure:
    """An error of a pass's task partition ``part`` as one line naming ``where``."""
    if isinstance(exc, MemoryError):
        return PassFailure(f"{where} in task partition {part}: MemoryError"
                           f"{': ' + str(exc) if str(exc) else ''}; the Python worker ran "
                           f"out of memory: give it more (spark.executor.pyspark.memory) "
                           f"or the stream more partitions")
    return PassFailure(f"{where} in task partition {part}: {type(exc).__name__}: {exc}")


def _tally(ex: PassExecutor, extra: dict[str, int]) -> dict[str, int]:
    """What one task of a pass adds to the run's accumulator: rows written per stream, its
    counters (late messages), each operator's meters, and ``extra`` (rows read per input)."""
    tally = {"out:" + sid: k for sid, k in ex.written.items()}
    for metric, k in ex.metrics.items():  # counters (late messages), summed on the driver
        if type(k) is int:
            tally["metric:" + metric] = k
    tally.update(extra)
    for op_id, meter in ex.op_meters.items():  # what each operator did, in this task
        for metric, k in meter_names(meter, ex.control_ns.get(op_id, 0)).items():
            if k:
                tally[f"{_OP}{op_id}|{metric}"] = k
    return tally


def _placing(plan: Any, sid: str, partitions: int, m: int
             ) -> Callable[[int, Iterator[Any]], Iterator[list[Any]]]:
    """``run`` for ``_read_arrow``: input ``sid``'s records in batches of ``(task partition,
    record)``: each in its own source partition when the input has the count its source has,
    else a keyed record in its key's partition (as Kafka's default partitioner) and any other
    in its own."""
    serde = plan.streams[sid].descriptor.serde
    if partitions == m:
        return _in_own_partitions
    if not isinstance(serde, KVSerde):
        def spread(i: int, recs: Iterator[Any]) -> Iterator[list[Any]]:
            for chunk in chunks(recs):
                yield [(i % m, rec) for rec in chunk]
        return spread
    key_bytes = serde.key_serde.serialize

    def keyed(i: int, recs: Iterator[Any]) -> Iterator[list[Any]]:
        partitioner = KeyPartitioner(m, key_bytes)
        for chunk in chunks(recs):
            yield [(partitioner(record_message(rec).key), rec) for rec in chunk]
    return keyed


def _in_own_partitions(i: int, recs: Iterator[Any]) -> Iterator[list[Any]]:
    for chunk in chunks(recs):
        yield [(i, rec) for rec in chunk]


def _in_own_partition(rec: tuple[Any, ...]) -> tuple[int, tuple[Any, ...]]:
    return record_partition(rec), rec


@contextlib.contextmanager
def _call_site(sc: Any, text: str | None) -> Iterator[None]:
    """Spark's call site while RDDs are made: it names the stages that end with them. PySpark
    sets its own around each call unless one is set already (its nesting depth). None: Spark's
    own."""
    if text is None:
        yield
        return
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
