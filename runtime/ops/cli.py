"""The ``samza-dsl`` command line."""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import signal
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from runtime.host.stacks import stacks_on
from samza_dsl.config import did_you_mean
from samza_dsl.errors import Interrupted, SamzaError, TaskError
from samza_dsl.jobconfig import job_config

if TYPE_CHECKING:
    from samza_dsl import StreamApplication

from runtime.ops.cli_config import cli_config as _cli_config
from runtime.ops.cli_config import config_file, parse_config
from runtime.ops.cli_config import partition_counts as _partitions
from runtime.ops.reprocess import cmd_reprocess

__all__ = ["main"]


def _config_options(p: argparse.ArgumentParser) -> None:
    """``-c KEY=VALUE`` and ``--config-file FILE``, on every command that builds the job."""
    p.add_argument("-c", "--config", action="append", default=[], metavar="KEY=VALUE",
                   help=_CONFIG_HELP)
    p.add_argument("--config-file", action="append", default=[], metavar="FILE",
                   help="KEY=VALUE lines (# comments), before any -c; repeatable")


def _run_flags(p: argparse.ArgumentParser) -> None:
    """The run's own flags, on the commands that look at or change a job's state (load, dump,
    status, reset): a run's command line works there as it is."""
    p.add_argument("--follow", action="store_true",
                   help="as the run took it; nothing changes here (accepted so that the run's "
                        "flags can be given again)")
    p.add_argument("--containers", type=_at_least(1), metavar="N",
                   help="job.container.count, as the run took it")
    p.add_argument("--container-id", type=_at_least(0), metavar="I",
                   help="job.container.id, as the run took it")


def cmd_plan(args: argparse.Namespace) -> int:
    from planner.render import GraphvizMissing, render
    from runtime.ops.loader import load_app

    # check the cheap arguments before running the user's module
    partitions = _partitions(args.partitions)
    config = _cli_config(args)
    app = load_app(args.app)
    plan = app.plan(partitions=partitions, config=config)
    if args.format != "text" or args.output:  # the text shows them itself, on standard output
        for line in plan.warnings:
            print(f"plan warning: {line}", file=sys.stderr)
    try:
        text = render(plan, args.format)
    except GraphvizMissing as exc:
        why = f"{exc}; without Graphviz, use --format text, json, dot or mermaid"
        raise SamzaError(why) from exc
    if not text.endswith("\n"):
        text += "\n"
    if args.output:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as exc:
            why = f"cannot write the plan to {args.output!r}: {exc.strerror or exc}"
            raise SamzaError(why) from exc
        print(f"wrote the {args.format} plan of {plan.job_name} to {args.output}", file=sys.stderr)
    else:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:
            # the reader went away (`samza-dsl plan APP | head`): stop quietly, as cat does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    return 0


def _read_jsonl(path: str, keyed: bool) -> list[object]:
    """The file's messages, as a ``JsonLines`` that knows each one's line."""
    from runtime.host.jsonlines import JsonLines

    out = JsonLines(path)
    for lineno, obj in _iter_jsonl(path, keyed):
        out.append(obj)
        out.lines.append(lineno)
    return out


def _iter_jsonl(path: str, keyed: bool) -> Iterator[tuple[int, object]]:
    """``(line number, message)`` of each message of the file, read a line at a time."""
    import msgspec

    from samza_dsl.json_text import MAX_JSON_LINE_BYTES, check_json_depth, explain_json_error
    from samza_dsl.kv import KV

    try:
        f = open(path, "rb")  # noqa: SIM115 (closed by the with below)
    except OSError as exc:
        raise SamzaError(f"cannot read {path}: {exc.strerror or exc} (looked in {os.getcwd()}); "
                         f"give a JSON Lines file, one message per line") from None
    with f:
        lineno = 0
        # a line is read up to the longest a message may be, never whole past it
        while line := f.readline(MAX_JSON_LINE_BYTES + 1):
            lineno += 1
            if len(line) > MAX_JSON_LINE_BYTES and not line.endswith(b"\n"):
                raise SamzaError(f"{path}:{lineno}: the line is longer than "
                                 f"{MAX_JSON_LINE_BYTES >> 20} MiB, the most a message may take "
                                 f"(samza_dsl.json_text.MAX_JSON_LINE_BYTES); split it into "
                                 f"smaller messages")
            if not line.strip():
                continue
            deep = check_json_depth(line)
            if deep is not None:
                raise SamzaError(f"{path}:{lineno}: the message is {deep}")
            try:
                obj = msgspec.json.decode(line)
            except (msgspec.DecodeError, UnicodeDecodeError) as exc:
                # msgspec before 0.23 raised UnicodeDecodeError for bytes that are not UTF-8,
                # 0.23 raises DecodeError: the bytes themselves decide which error this is
                try:
                    line.decode()
                except UnicodeDecodeError as bad:
                    raise SamzaError(
                        f"{path}:{lineno}: not UTF-8 (byte {line[bad.start]:#04x} at byte "
                        f"{bad.start + 1} of the line); JSON Lines files are UTF-8: convert it "
                        f"(e.g. iconv -t UTF-8)") from None
                raise SamzaError(f"{path}:{lineno}: not JSON ({explain_json_error(line, exc)}); "
                                 f"each line must be one JSON message") from None
            if keyed:
                if not isinstance(obj, dict) or "key" not in obj or "value" not in obj:
                    raise SamzaError(f"{path}:{lineno}: the stream is keyed: each line must be "
                                     f'{{"key": ..., "value": ...}}')
                obj = KV(obj["key"], obj["value"])
            yield lineno, obj


def _sample_inputs(module_ref: str, app: StreamApplication, n: int) -> dict[str, object]:
    import sys

    from runtime.ops.loader import load_module

    module = load_module(module_ref.partition(":")[0])
    sample = getattr(module, "sample_input", None)  # foreign: the user's module
    if sample is None:
        raise SamzaError(f"{module_ref!r} has no sample_input(n) function for --sample; give "
                         f"inputs with --input STREAM=FILE.jsonl")
    data = sample(n)
    inputs = app.spec().inputs
    if isinstance(data, dict):
        return data
    if len(inputs) != 1:
        print("sample_input returned a list but the application has several inputs",
              file=sys.stderr)
        raise SamzaError("sample_input(n) must return {stream_id: messages} for several inputs")
    return {next(iter(inputs)): data}


def _run_inputs(args: argparse.Namespace, app: Any, config: dict[str, object],
                inputs: dict[str, object], source: dict[str, str]
                ) -> dict[str, dict[int, set[int]]]:
    """``--input``/``--sample`` into a job on the local log or Kafka (``runtime.run_inputs``;
    ``inputs`` is emptied: the job reads them from its streams), and the ``--skip`` records."""
    from runtime.engine.systems import job_system
    from runtime.run_inputs import feed_inputs, parse_skips

    mode = "append" if args.append else "replace" if args.replace else None
    on_log = job_system(app).on_log
    if mode and not inputs:
        raise SamzaError(f"--{mode} says how --input or --sample join what an input holds; give "
                         f"one of them")
    if mode and not on_log:
        raise SamzaError(f"--{mode}: {app.name!r} runs in memory, where --input and --sample are "
                         f"the whole input of each run; leave --{mode} out")
    spec = app.spec()  # a wrong --skip is found before any loading
    skip = parse_skips(args.skip, spec.inputs, spec.intermediates)
    if inputs and on_log:
        for line in feed_inputs(app, config, inputs, source, mode, args.sample):  # type: ignore[arg-type]
            print(line, file=sys.stderr)
        inputs.clear()
    return skip


def cmd_run(args: argparse.Namespace) -> int:
    from runtime.ops.loader import load_app
    from runtime.runner import LocalRunner
    from runtime.summary import print_outputs

    app = load_app(args.app)
    inputs: dict[str, object] = {}
    source: dict[str, str] = {}
    if args.sample:
        inputs.update(_sample_inputs(args.app, app, args.sample))
        source.update(dict.fromkeys(inputs, "--sample"))
    for pair in args.input:
        sid, sep, path = pair.partition("=")
        if not sep:
            raise SamzaError(f"--input takes STREAM=FILE.jsonl, got {pair!r}")
        d = app.spec().inputs.get(sid)
        if d is None:
            raise SamzaError(f"--input {sid!r}: not an input of {app.name!r}"
                             f"{did_you_mean(sid, app.spec().inputs)}; inputs: "
                             f"{', '.join(sorted(app.spec().inputs))}")
        inputs[sid] = _read_jsonl(path, d.keyed)
        source[sid] = "--input"
    config: dict[str, object] = dict(_cli_config(args))
    skip = _run_inputs(args, app, config, inputs, source)
    if args.containers is not None:
        config["job.container.count"] = args.containers
    if args.container_id is not None:
        config["job.container.id"] = args.container_id
    runner = LocalRunner(app, config, inputs=inputs,  # type: ignore[arg-type]
                         progress=None if args.quiet else sys.stderr, follow=args.follow,
                         skip=skip)
    page = _start_page(args, runner) if args.ui else None
    try:
        runner.run()
        if runner.interrupted is not None:  # a bounded run stopped before its inputs ended
            print(f"samza-dsl run: interrupted by {signal.Signals(runner.interrupted).name} "
                  f"before its inputs ended; what it processed is committed, and the next run "
                  f"resumes after its checkpoint", file=sys.stderr)
            return 128 + runner.interrupted
        where = runner.jobs.where(runner.job) if runner.job is not None else None
        if where:
            print(f"{where}; this run's outputs:")
        print_outputs(runner, limit=args.show, app_ref=args.app)
    finally:
        if page is not None:
            page.stop()
        runner.close()
    return 0


def _start_page(args: argparse.Namespace, runner: Any) -> Any:
    """``run --ui``: the job page (``runtime.ops.ui``), served from the runner's metrics."""
    from runtime.host.reporters import reporter_names
    from runtime.ops.ui import ContainersSource, RunnerSource, UIServer, parse_address

    host, port = parse_address(args.ui)
    source: Any
    if runner.containers > 1:
        if not runner.jobs.metrics_in_log:
            raise SamzaError(
                f"--ui shows a run of {runner.containers} containers on the local system; on "
                f"Kafka, run `samza-dsl ui {args.app} --from http://HOST:PORT/metrics` next to "
                f"the job (metrics.reporters=prometheus: container i serves on "
                f"metrics.reporter.prometheus.port + i)")
        # the containers report to the job's snapshot stream, once a second unless the job says
        names = reporter_names(runner.config)
        page: dict[str, object] = {"metrics.reporters": ",".join([*names, "snapshot"])} \
            if "snapshot" not in names else {}
        if not runner.config.metrics.given("reporter_interval_ms"):
            page["metrics.reporter.interval.ms"] = 1000
        if page:
            runner.config = runner.config.updated(page)
        interval = runner.config.metrics.reporter_interval_ms / 1000.0
        source = ContainersSource(
            runner, lambda: runner.jobs.open_job(runner.app, runner.config, app_ref=args.app),
            interval)
        plan = lambda: runner.plan  # noqa: E731
    else:
        cid = runner.config.job.container_id
        source = RunnerSource(runner, f"samza-container-{cid or 0}")
        plan = lambda: runner.plan if runner.container else None  # noqa: E731
    server = UIServer(source, plan, runner.config.job.job_name, host, port)
    url = server.start()
    print(f"job page: {url}", file=sys.stderr, flush=True)
    return server


def cmd_ui(args: argparse.Namespace) -> int:
    """The job page of a job running elsewhere: from its metrics stream in the local log, or
    from its Prometheus endpoint (``--from``)."""
    import threading

    from runtime.ops.loader import load_app
    from runtime.ops.ui import PrometheusSource, StreamSource, UIServer, parse_address

    host, port = parse_address(args.ui)
    partitions = _partitions(args.partitions)
    given = _cli_config(args)
    app = load_app(args.app)
    config = job_config(app, given)
    job_name = config.job.job_name
    job = None
    source: Any
    if args.source:
        source = PrometheusSource(args.source)
        plan = app.plan(partitions=partitions, config=config)
    else:
        from runtime.engine.systems import job_system

        job = job_system(app).job_system().open_job(app, config, app_ref=args.app)
        plan = job.plan
        source = StreamSource(job.log_of(job.main_system), f"{job.job_name}-metrics")
    server = UIServer(source, plan, job_name, host, port)
    done = threading.Event()
    try:
        url = server.start()
        where = args.source or f"stream {job_name}-metrics"
        print(f"job page of {job_name} (from {where}): {url}", file=sys.stderr, flush=True)
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        while not done.wait(0.5):
            pass
    finally:
        server.stop()
        if job is not None:
            job.close()
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    """The module's ``sample_input(N)`` for one input, as the JSON Lines ``--input``, ``load`` and
    ``reprocess`` read."""
    import msgspec

    from runtime.ops.loader import load_app
    from samza_dsl.kv import KV

    if args.n < 0:
        raise SamzaError(f"sample takes a number of messages N >= 0, got {args.n}")
    app = load_app(args.app)
    if args.stream not in app.spec().inputs:
        raise SamzaError(f"{args.stream!r} is not an input of {app.name!r}"
                         f"{did_you_mean(args.stream, app.spec().inputs)}; its inputs: "
                         f"{', '.join(sorted(app.spec().inputs))}")
    messages = _sample_inputs(args.app, app, args.n).get(args.stream, [])
    encode = msgspec.json.Encoder().encode
    out = sys.stdout.buffer
    for m in messages:  # type: ignore[attr-defined]
        row = {"key": m.key, "value": m.value} if type(m) is KV else m
        out.write(encode(row) + b"\n")
    out.flush()
    return 0


def _jobs(args: argparse.Namespace) -> tuple[Any, Any]:
    """The application, and the ``JobSystem`` of the system its streams are on."""
    from runtime.engine.systems import job_system
    from runtime.ops.loader import load_app

    app = load_app(args.app)
    return app, job_system(app).job_system()


def cmd_load(args: argparse.Namespace) -> int:
    import shlex

    app, jobs = _jobs(args)
    again = shlex.join(["samza-dsl", "load", args.app, args.stream,
                        *(x for f in args.config_file for x in ("--config-file", f)),
                        *(x for c in args.config for x in ("-c", c))])
    line = jobs.load_file(app, job_config(app, _cli_config(args)), args.stream, args.file,
                          lambda keyed: _iter_jsonl(args.file, keyed), again, app_ref=args.app)
    print(line, file=sys.stderr)
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise SamzaError(f"--limit takes a number of messages >= 1, got {args.limit}")
    app, jobs = _jobs(args)
    if args.uncommitted and jobs.uncommitted_note:
        print(jobs.uncommitted_note, file=sys.stderr)
    out = sys.stdout.buffer
    for line in jobs.dump_lines(app, job_config(app, _cli_config(args)), args.stream, args.limit,
                                offsets=args.offsets, uncommitted=args.uncommitted,
                                app_ref=args.app):
        out.write(line + b"\n")
    out.flush()
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """The job's containers, its partitions' checkpoints and lag, its stores and generation
    (``runtime.ops.status``); reads only, so it runs beside the job."""
    import msgspec

    from runtime.ops.status import status_text

    app, jobs = _jobs(args)
    status = jobs.status(app, job_config(app, _cli_config(args)), args.app)
    if args.json:
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(status)) + b"\n")
    else:
        sys.stdout.write(status_text(status))
    sys.stdout.flush()
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    """A running job's store: a key, a prefix or a range, latest or committed
    (``runtime.ops.query``, ``samza_dsl.query``)."""
    import msgspec

    from runtime.ops.query import answer_text, query_token, query_urls
    from samza_dsl.query import QueryClient

    app, jobs = _jobs(args)
    config = _cli_config(args)
    urls = args.url or query_urls(app, config, lambda: jobs.status(app, config, args.app))
    client = QueryClient(urls, token=query_token(app, config, args.token), standby=args.standby)
    if args.prefix is not None:
        answer = client.prefix(args.store, args.prefix, read=args.read, limit=args.limit)
    elif args.start is not None or args.end is not None:
        answer = client.range(args.store, args.start, args.end, read=args.read,
                              limit=args.limit)
    elif args.key is not None:
        answer = client.get(args.store, args.key, read=args.read)
    else:
        raise SamzaError("samza-dsl query: give a KEY, --prefix P, or --from A and/or --to B")
    if args.json:
        sys.stdout.buffer.write(msgspec.json.encode(answer) + b"\n")
    else:
        sys.stdout.write(answer_text(answer))
    sys.stdout.flush()
    return 0 if answer.get("found", True) else 1


def cmd_reset(args: argparse.Namespace) -> int:
    from runtime.engine.systems import NeverRan

    app, jobs = _jobs(args)
    try:
        name, gone = jobs.reset(app, job_config(app, _cli_config(args)), outputs=args.outputs,
                                app_ref=args.app)
    except NeverRan as exc:
        print(f"samza-dsl reset: nothing to reset: {exc}", file=sys.stderr)
        return 0
    print(f"reset job {name}: " + ("; ".join(gone) if gone else "nothing to remove"),
          file=sys.stderr)
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    if args.batch < 1:
        raise SamzaError(f"--batch takes a number of records >= 1, got {args.batch}")
    app, jobs = _jobs(args)
    name, results = jobs.compact(app, job_config(app, _cli_config(args)), args.batch,
                                 app_ref=args.app)
    for r in results:
        print(f"{r.stream} partition {r.partition}: below offset {r.upto}, {r.records_before} "
              f"record(s) to {r.records_after} ({r.tombstones_dropped} delete(s) dropped) in "
              f"{r.seconds:.2f} s", file=sys.stderr)
    if not results:
        print(f"job {name}: no changelog partition with a checkpoint to compact",
              file=sys.stderr)
    return 0


def _matching_keys(key: str | None) -> list[Any]:
    """The reference rows ``samza-dsl config KEY`` shows: all of them; the key itself (a
    stream's, store's or system's key matches its ``<id>``/``<name>`` row); or those under a
    prefix (``task.``). None found is an error with the closest key."""
    import difflib
    import re

    from samza_dsl.config import key_reference

    rows = key_reference()
    if not key:
        return rows

    def pattern(ref: str) -> re.Pattern[str]:
        parts = re.split(r"(<id>|<name>|\*)", ref)
        return re.compile("".join(".+" if p in ("<id>", "<name>", "*") else re.escape(p)
                                  for p in parts))

    found = [r for r in rows if r.key == key or pattern(r.key).fullmatch(key)]
    found = found or [r for r in rows if r.key.startswith(key)]
    if not found:
        close = difflib.get_close_matches(key, [r.key for r in rows], n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SamzaError(f"no config key {key!r}{hint}; `samza-dsl config` lists them all")
    return found


def cmd_init(args: argparse.Namespace) -> int:
    """A new project in directory NAME (``runtime.ops.scaffold``), and what to do next."""
    from pathlib import Path

    from runtime.ops.scaffold import init_project

    target = Path(args.name)
    init_project(target)
    print(f"made {target}/ with pipeline.py, test_pipeline.py, sample.jsonl and README.md; "
          f"next:\n  cd {target}\n  samza-dsl run pipeline.py:app --input lines=sample.jsonl"
          f"\n  pytest   (pip install pytest hypothesis)")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """The configuration keys with their types, defaults and meanings (``key_reference``); with
    ``--app``, the config its job runs with: each key's value and where it comes from."""
    if args.app:
        rows = _effective_config(args)
        if args.key:
            rows = [r for r in rows if r[0] == args.key or r[0].startswith(args.key)]
            if not rows:
                raise SamzaError(f"job of {args.app} has no config key {args.key!r} set, and "
                                 f"none under it; `samza-dsl config {args.key}` describes it")
        width = max(len(r[0]) for r in rows)
        for key, value, source in rows:
            print(f"{key:<{width}}  {value}  ({source})")
        return 0
    for r in _matching_keys(args.key):
        print(f"{r.key}  {r.type}  default {r.default}")
        print(textwrap.fill(r.meaning, width=_text_width(), initial_indent="    ",
                            subsequent_indent="    ", break_on_hyphens=False))
    return 0


def _text_width() -> int:
    """The width ``samza-dsl config`` wraps meanings at: the terminal's, at most 100."""
    return max(40, min(100, shutil.get_terminal_size((100, 24)).columns))


def _effective_config(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(key, value, source) of every key the job of ``args.app`` runs with: given on the
    command line (``-c``, a ``--config-file``), in the application, set by the planner, or a
    key's default."""
    from runtime.ops.loader import load_app
    from samza_dsl.config import KNOWN_KEYS, shown_value, validate_config
    from samza_dsl.errors import PlanError

    app = load_app(args.app)
    source: dict[str, str] = dict.fromkeys(validate_config(app.config), "application")
    for path in args.config_file:
        source.update(dict.fromkeys(validate_config(config_file(path)), f"--config-file {path}"))
    source.update(dict.fromkeys(validate_config(parse_config(args.config)), "-c"))
    config = job_config(app, _cli_config(args))
    try:
        plan = app.plan(partitions=_partitions(args.partitions), config=config)
        config = plan.config
    except PlanError as exc:  # shown without what the planner would add
        print(f"samza-dsl: note: not planned ({exc}); keys the planner sets are left out",
              file=sys.stderr)
    rows = [(k, repr(shown_value(k, v)), source.get(k, "planner")) for k, v in config.items()]
    rows += [(k, repr(key.default), "default") for k, key in KNOWN_KEYS.items()
             if k not in config and key.default is not None]
    return sorted(rows)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: what is wrong and where the help is (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def _at_least(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``least``."""
    def number(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"takes a whole number, got {text!r}") from None
        if n < least:
            raise argparse.ArgumentTypeError(f"takes a number >= {least}, got {n}")
        return n
    return number


_CONFIG_HELP = "a config key and its value; `samza-dsl config` lists the keys"


def build_parser() -> argparse.ArgumentParser:
    from samza_dsl import __version__

    parser = _Parser(prog="samza-dsl", description="Samza's high-level API in Python")
    parser.add_argument("--version", action="version", version=f"samza-dsl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_plan_and_run(sub)
    _add_ui_and_reprocess(sub)
    _add_data_commands(sub)
    _add_job_commands(sub)
    return parser


def _add_plan_and_run(sub: Any) -> None:
    """`samza-dsl plan` and `samza-dsl run`."""
    from planner.render import FORMATS

    text = "plan an application and print or draw the plan"
    p = sub.add_parser("plan", help=text, description=_described(
        text, "stages, intermediate streams and their partition counts, tables and the tier "
        "each stage takes on Spark, as text, json, dot, mermaid, svg or html"))
    p.add_argument("app", help="module_or_file.py:attr")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    _config_options(p)
    p.add_argument("--partitions", action="append", default=[], metavar="STREAM=COUNT",
                   help="partition count of a stream the plan cannot look up")
    p.set_defaults(func=cmd_plan)

    text = "run an application until its bounded inputs end"
    r = sub.add_parser("run", help=text, description=_described(
        text, "on the embedded local system (state under .samza/<job>) or Kafka; a second run "
        "resumes after the checkpoint. --sample N feeds the inputs with the module's "
        "sample_input(N), which returns a list of messages (one input) or {stream id: "
        "messages}; --follow keeps reading new input until Ctrl-C"))
    r.add_argument("app", help="module_or_file.py:attr")
    _config_options(r)
    r.add_argument("--input", action="append", default=[], metavar="STREAM=FILE.jsonl",
                   help="messages for an input stream, one JSON per line "
                        '({"key": ..., "value": ...} for keyed streams)')
    r.add_argument("--sample", type=_at_least(0), default=0, metavar="N",
                   help="feed the inputs with the module's sample_input(N)")
    how = r.add_mutually_exclusive_group()
    how.add_argument("--append", action="store_true",
                     help="--input/--sample go after what an input already holds")
    how.add_argument("--replace", action="store_true",
                     help="--input/--sample replace what an input holds, and the job starts "
                          "over (as after `reset`; outputs stay)")
    r.add_argument("--skip", action="append", default=[], metavar="STREAM:PARTITION:OFFSET",
                   help="pass over one record of an input in this run (a poison record), "
                        "logged and counted; repeatable")
    r.add_argument("--show", type=_at_least(0), default=10, help="messages to print per output: the last N this run wrote (default 10)")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    r.add_argument("--traceback", action="store_true",
                   help="on an error, print the whole stack (the user function's frames too) "
                        "before the one-line error")
    r.add_argument("--follow", action="store_true",
                   help="keep reading inputs past their end until stopped (Ctrl-C)")
    r.add_argument("--containers", type=_at_least(1), metavar="N",
                   help="job.container.count: run the job in N container processes")
    r.add_argument("--container-id", type=_at_least(0), metavar="I",
                   help="job.container.id: run only container I of the job's "
                        "job.container.count (one per host or pod)")
    r.add_argument("--ui", metavar="[HOST:]PORT",
                   help="serve the live job page here (host 127.0.0.1 unless given; port 0: any "
                        "free one); read-only")
    r.set_defaults(func=cmd_run)


def _add_ui_and_reprocess(sub: Any) -> None:
    """`samza-dsl ui` and `samza-dsl reprocess`."""
    text = ("serve the live job page of a job running elsewhere, from its metrics stream "
            "<job>-metrics in the local log, or from its Prometheus endpoint (--from)")
    u = sub.add_parser("ui", help=text, description=text[0].upper() + text[1:] + ".")
    u.add_argument("app", help="module_or_file.py:attr")
    u.add_argument("--from", dest="source", metavar="URL",
                   help="the job's Prometheus endpoint, e.g. http://127.0.0.1:9100/metrics")
    u.add_argument("--ui", default="127.0.0.1:8080", metavar="[HOST:]PORT",
                   help="where to serve the page (default 127.0.0.1:8080)")
    _config_options(u)
    u.add_argument("--partitions", action="append", default=[], metavar="STREAM=COUNT",
                   help="partition count of a stream the plan cannot look up")
    u.set_defaults(func=cmd_ui)

    text = "reprocess files (JSON Lines or Parquet) with the application's operators on Spark"
    rp = sub.add_parser("reprocess", help=text, description=_described(
        text, "the same plan and operator code as a streaming run; every input is given with "
        "--input, and each --output is written as a directory of part files"))
    rp.add_argument("app", help="module_or_file.py:attr")
    rp.add_argument("--input", action="append", default=[], metavar="STREAM=PATH",
                    help="an input stream's rows: a .jsonl/.json or .parquet file, a directory of "
                         "them or a glob (every input is needed)")
    rp.add_argument("--output", action="append", default=[], metavar="STREAM=PATH",
                    help="write an output stream to a directory of part files (Parquet if PATH "
                         "ends in .parquet, else JSON Lines); a rerun replaces it. Outputs "
                         "without --output are counted and shown")
    rp.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")
    _config_options(rp)
    rp.add_argument("--conf", action="append", default=[], metavar="spark.KEY=VALUE",
                    help="a Spark setting for the session, as spark-submit --conf takes it "
                         "(e.g. spark.executor.memory=2g); repeatable")
    rp.add_argument("--show", type=_at_least(0), default=5, metavar="N",
                    help="messages to print of each output without --output (default 5)")
    rp.add_argument("--no-progress", action="store_true",
                    help="no progress bars or stage table on standard error")
    rp.set_defaults(func=cmd_reprocess)


def _add_data_commands(sub: Any) -> None:
    """`samza-dsl sample`, `load`, `dump` and `status`."""
    text = ("print the module's sample_input(N) for one input as JSON Lines (for --input, "
            "load and reprocess)")
    sm = sub.add_parser("sample", help=text, description=_described(
        text, "the application's module defines sample_input(n) returning n messages: a list "
              "when the application has one input, else {stream id: list}; a keyed stream's "
              'messages are KVs, printed as {"key": ..., "value": ...}'))
    sm.add_argument("app", help="module_or_file.py:attr")
    sm.add_argument("stream", help="input stream id")
    sm.add_argument("n", type=int, metavar="N", help="sample size: sample_input(N)")
    sm.set_defaults(func=cmd_sample)

    text = ("append JSON Lines to a stream of the job: in the embedded local log, all or "
            "nothing (allowed while the job runs), or to its Kafka topic")
    ld = sub.add_parser("load", help=text, description=text[0].upper() + text[1:] + ".")
    ld.add_argument("app", help="module_or_file.py:attr")
    ld.add_argument("stream", help="stream id")
    ld.add_argument("file", help='one JSON message per line ({"key": ..., "value": ...} for keyed '
                                 "streams)")
    _config_options(ld)
    _run_flags(ld)
    ld.set_defaults(func=cmd_load)

    text = ("print a stream of the job as JSON Lines, from the embedded local log or its Kafka "
            "topic")
    d = sub.add_parser("dump", help=text, description=text[0].upper() + text[1:] + ".")
    d.add_argument("app", help="module_or_file.py:attr")
    d.add_argument("stream", help="stream id")
    d.add_argument("--limit", type=_at_least(1), default=None, metavar="N",
                   help="only the last N messages")
    d.add_argument("--offsets", action="store_true",
                   help='print each message as {"partition": P, "offset": O, "message": M}')
    d.add_argument("--uncommitted", action="store_true",
                   help="on Kafka, also the records of transactions not committed (open or "
                        "aborted), which no read_committed reader sees: for debugging an "
                        "exactly-once job (by default dump shows what a downstream reader reads)")
    _config_options(d)
    _run_flags(d)
    d.set_defaults(func=cmd_dump)

    text = ("show a job's containers (running, with their PIDs), each task's checkpointed "
            "offsets, lag and checkpoint age, its stores' sizes and its generation, on the "
            "embedded local system or Kafka; reads only, so it may run beside the job")
    st = sub.add_parser("status", help=text, description=text[0].upper() + text[1:] + ".")
    st.add_argument("app", help="module_or_file.py:attr")
    st.add_argument("--json", action="store_true",
                    help="print the status as one JSON object (its shape: docs/operations.md)")
    _config_options(st)
    _run_flags(st)
    st.set_defaults(func=cmd_status)

    text = ("ask a running job's store for a key, a prefix or a range, from its latest or its "
            "committed state, at the container that holds the key (the job runs with "
            "query.enabled=true; docs/queries.md)")
    q = sub.add_parser("query", help=text, description=text[0].upper() + text[1:] + ".")
    q.add_argument("app", help="module_or_file.py:attr")
    q.add_argument("store", help="the store (a table's name)")
    q.add_argument("key", nargs="?", help="the key: JSON where it parses so and the store's key "
                   "serde takes it, else the text")
    q.add_argument("--prefix", help="the entries whose string keys start with PREFIX")
    q.add_argument("--from", dest="start", help="the entries from this key on (with --to: up to "
                   "it, not including it)")
    q.add_argument("--to", dest="end", help="the entries below this key")
    q.add_argument("--limit", type=_at_least(1), default=100, help="entries at most (100)")
    q.add_argument("--read", choices=("latest", "committed"), default="latest",
                   help="latest: what the job's get gives now; committed: what its last "
                   "checkpoint covers")
    q.add_argument("--standby", action="store_true", help="a key whose active member does not "
                   "answer (down, moving) may be read from a member's standby replica of its "
                   "task: committed state at most")
    q.add_argument("--url", action="append", help="a container's query endpoint "
                   "(http://HOST:PORT), instead of those the job recorded; repeat for each")
    q.add_argument("--token", help="the endpoints' query.token: env:VAR, file:PATH or itself "
                   "(default: the job's query.token)")
    q.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    _config_options(q)
    _run_flags(q)
    q.set_defaults(func=cmd_query)


def _add_job_commands(sub: Any) -> None:
    """`samza-dsl compact`, `reset`, `config` and `init`."""
    text = ("compact the job's changelogs in the embedded local log below their checkpoints, "
            "now (a running job does it in the background); refused while the job runs")
    cp = sub.add_parser("compact", help=text, description=_described(
        text, "each changelog keeps the latest entry of each key"))
    cp.add_argument("app", help="module_or_file.py:attr")
    cp.add_argument("--batch", type=_at_least(1), default=65536, metavar="N",
                    help="records rewritten per write transaction, at most about (default "
                         "65536): smaller holds the log's write lock for less time")
    _config_options(cp)
    cp.set_defaults(func=cmd_compact)

    text = ("forget a job's progress: checkpoints, stores, intermediate streams and "
            "changelogs (inputs stay); refused while the job runs")
    rs = sub.add_parser("reset", help=text, description=_described(
        text, "its next run processes its inputs from the start; --outputs empties the "
              "outputs too"))
    rs.add_argument("app", help="module_or_file.py:attr")
    rs.add_argument("--outputs", action="store_true", help="also empty the output streams (on "
                    "Kafka: delete their topics, which the next run creates again)")
    _config_options(rs)
    _run_flags(rs)
    rs.set_defaults(func=cmd_reset)

    text = "list the configuration keys (-c KEY=VALUE) with their types, defaults and meanings"
    cf = sub.add_parser("config", help=text, description=_described(
        text, "KEY shows one key (streams.views.retention.ms matches streams.<id>.retention.ms)"
              " or the keys under a prefix (task.); keys of your own go under user.*"))
    cf.add_argument("key", nargs="?", metavar="KEY", help="a key or a prefix of keys")
    cf.add_argument("--app", metavar="module_or_file.py:attr",
                    help="show the config this application's job runs with: each key's value "
                         "and where it comes from (-c, --config-file, the application, the "
                         "planner, a default)")
    _config_options(cf)
    cf.add_argument("--partitions", action="append", default=[], metavar="STREAM=COUNT",
                    help="with --app: partition count of a stream the plan cannot look up")
    cf.set_defaults(func=cmd_config)

    text = "make a new project in directory NAME that runs as it is written"
    it = sub.add_parser("init", help=text, description=_described(
        text, "an application (pipeline.py), its tests with a hypothesis property "
              "(test_pipeline.py), a sample input (sample.jsonl) and a README with the two "
              "commands: samza-dsl run pipeline.py:app --input lines=sample.jsonl, and pytest"))
    it.add_argument("name", metavar="NAME", help="the project's directory and name")
    it.set_defaults(func=cmd_init)


def _described(help_text: str, more: str) -> str:
    """A subcommand's description: its one-line help as a sentence, then ``more``."""
    return f"{help_text[0].upper()}{help_text[1:]}. {more[0].upper()}{more[1:]}."


def main(argv: Sequence[str] | None = None) -> int:
    from runtime.host.watchdog import leave_stuck_threads

    code = _command(argv)
    main_module = sys.modules.get("__main__")
    spec = getattr(main_module, "__spec__", None)  # foreign: a module
    if os.path.basename(sys.argv[0]) == "samza-dsl" or (spec is not None
                                                         and spec.name == "runtime.ops.cli"):
        # the process is the command's: a thread in a call that never returns (a sink's, a
        # driver's) must not keep it from exiting
        leave_stuck_threads("samza-dsl", code)
    return code


def _command(argv: Sequence[str] | None) -> int:
    stacks_on(signal.SIGUSR1)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # named after the command, with its help
        parser.exit(2, f"samza-dsl {args.command}: error: unrecognized arguments: "
                       f"{' '.join(extra)}; see samza-dsl {args.command} --help\n")
    try:
        return int(args.func(args))
    except Interrupted as exc:  # stopped by a signal, not done: as a shell reports it
        print(f"samza-dsl {args.command}: interrupted: {exc}", file=sys.stderr)
        return exc.exit_code
    except SamzaError as exc:
        _print_error(args, exc)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C before a run could take it as a stop (or in a command that is no run): one
        # line, as a shell reports an interrupted command (128 + SIGINT)
        print(f"samza-dsl {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`dump | head`): stop quietly, as Unix tools do; stdout is
        # pointed at devnull so the interpreter's last flush does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except OSError as exc:
        from runtime.host.storage import storage_error

        fault = storage_error(exc, str(exc.filename or os.getcwd()), f"running {args.command}")
        if fault is not None:
            text = str(fault)
        elif exc.filename is not None and exc.errno in _PATH_ERRNOS:
            text = f"{exc.filename}: {exc.strerror} (looked in {os.getcwd()}); check the path"
        else:
            raise  # not about a path the user gave: a bug, with its traceback
        print(f"samza-dsl {args.command}: error: {text}", file=sys.stderr)
        return 2


def _print_error(args: argparse.Namespace, exc: SamzaError) -> None:
    """The one-line error; with ``--traceback``, the whole stack before it (a function's own
    error, which the line shows only by its file and line, with all its frames); without, a
    hint that it can be had where there is one to show."""
    if getattr(args, "traceback", False):  # foreign: argparse's Namespace
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    more = ("; --traceback shows the whole stack" if hasattr(args, "traceback")  # foreign: argparse's
            and not args.traceback and exc.__cause__ is not None
            and isinstance(exc, TaskError) else "")
    text = str(exc)
    if args.command == "run":  # a command it suggests, as it is to be run
        text = text.replace("`samza-dsl run APP ", f"`samza-dsl run {args.app} ").replace(
            "`samza-dsl reset APP`", f"`samza-dsl reset {args.app}`")
    print(f"samza-dsl {args.command}: error: {text}{more}", file=sys.stderr)


#: an OSError about a path a user named: a user mistake, not a bug
_PATH_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG,
                          errno.ELOOP})


if __name__ == "__main__":
    raise SystemExit(main())
