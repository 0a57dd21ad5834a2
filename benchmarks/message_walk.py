"""The walk of one message through the project's rooms: a Kafka input, a tumbling event-time
window (a count per key), a Kafka output, at least once, run by ``LocalRunner`` on a fresh broker
(tansu or Apache Kafka, as ``benchmarks/brokers.py`` starts them).

    python -m benchmarks.message_walk [--broker tansu|apache-kafka] [--steps]
    PYTHONPATH=<another tree> python benchmarks/message_walk.py   # the same walk on that tree

What it measures. A profile hook (``sys.setprofile`` and ``threading.setprofile``), on only
while ``runner.run()`` runs, sees every call into a function of the project's files. A call
*carries the message* when one of its arguments (``self`` and ``cls`` left out) holds the
marker key ``walk-me`` (one input message has it, and its window's pane and its output
record keep it), looked for three levels deep through str and bytes, containers, and small
objects (at most 12 attributes: records, KVs, panes, batches, not services such as a task or a
container, whose inboxes would hold every message). A coroutine's resumptions are not calls.
The walk is the carrying calls from the first one made in the Kafka consumer's ``poll`` (the
function that hands fetched records to a task) through decoding, the task's batch, the
window's store and pane, encoding, to the producer's ``send_batch`` of the record (the first
aiokafka ``send_batch`` made by a carrying call). Each call is one step, from its caller (the
nearest project frame below it) to its callee; a step's rooms are its caller's room, then its
callee's.

What a room is: ``samza_dsl/``, ``planner/``, ``operators/``, each sub-package of ``runtime/``,
and each loose module of ``runtime/`` a room of its own (on a tree whose ``runtime/`` had loose
modules that now live in a sub-package, each of those is its own room, on the floor of the
sub-package it moved to). The application's own functions (this file's key, time, fold and
map functions) are shown in the steps but are no room and no floor.

What it prints: the rooms in the walk's order (a room entered again after leaving counts again),
the distinct count, the files of each room the walk touched, and every climb: a step from a
lower floor to a higher one (floors below, ``FLOORS``), named a callback when the function
called is a function or closure handed down, or a method of an object handed down. ``--steps``
prints every step.

What it leaves out: calls that do not carry the message (commits, timers and ticks with no
message in their arguments, metrics and tracing, the checkpoint), a return (the message coming
back up out of a call is not counted as a new visit), calls into libraries (aiokafka, msgspec,
lmdb), and the window's store: the window keeps its panes in memory and writes the changed
ones into its store at a commit (``flush_state``), so a pane that closes between two commits
never reaches the store, and the changelog's writes come after the outputs are sent. The walk of one run is the walk of the code that ran: another shape of job
(an async step, a join, exactly once) walks elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import dis
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import CodeType, FrameType, GetSetDescriptorType, MemberDescriptorType
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

import runtime
from benchmarks.brokers import BROKERS, start_broker
from runtime.kafka.admin import TopicSpec, ensure_topics
from runtime.runner import LocalRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import KafkaSystem

MARKER = "walk-me"
MARKER_BYTES = MARKER.encode()
ROOT = Path(runtime.__file__).resolve().parents[1]  # the tree this run imports
APP_FILE = str(Path(__file__).resolve())

#: floors, top (calls down) to bottom
FLOORS = {"runtime/ops": 8, "runtime/spark": 7, "runtime/testing.py": 7, "runtime/runner.py": 7,
          "runtime/__init__.py": 7, "runtime/kafka": 6, "runtime/local": 6,
          "runtime/memory.py": 6, "runtime/run_inputs.py": 6, "runtime/summary.py": 6,
          "runtime/progress.py": 6, "runtime/container_rows.py": 6, "runtime/engine": 5,
          "runtime/state": 4, "runtime/host": 3, "runtime/connectors": 2, "planner": 2,
          "operators": 2, "samza_dsl": 1}
#: a loose module of an older ``runtime/`` -> the sub-package it moved to (its floor)
MOVED = {**dict.fromkeys(
    ("batch", "checkpoints", "chooser", "codec", "collector", "commit", "container", "dag",
     "dump", "elastic", "event_time", "event_time_ahead", "faults", "in_flight", "job",
     "join_check", "late", "records", "serde_util", "sinks", "stage_outputs", "systems", "task",
     "task_env", "task_errors", "task_wiring", "watermarks", "wiring"), "runtime/engine"),
    **dict.fromkeys(("health", "http_thread", "job_lock", "jobdir", "jsonlines", "metrics",
                     "reporters", "storage"), "runtime/host"),
    **dict.fromkeys(("cli", "loader", "scaffold", "status", "ui"), "runtime/ops")}
APP = "(application)"
_JSON: JsonSerde[dict[str, float]] = JsonSerde()
SCAN_ATTRS = 12  # an object with more attributes than this is a service, not a record
SCAN_ITEMS = 256


def room_of(path: str) -> str | None:
    """The room of a file of the tree, ``APP`` for this file, None outside both."""
    if path == APP_FILE:
        return APP
    try:
        rel = Path(path).resolve().relative_to(ROOT).parts
    except ValueError:
        return None
    if rel[0] in ("samza_dsl", "planner", "operators"):
        return rel[0]
    if rel[0] != "runtime" or len(rel) < 2:
        return None
    return f"runtime/{rel[1]}"


def floor_of(room: str) -> int | None:
    if room in FLOORS:
        return FLOORS[room]
    if room.startswith("runtime/") and room.endswith(".py"):
        moved = MOVED.get(room[len("runtime/"):-3])
        return FLOORS[moved] if moved else None
    return None


def carries(obj: Any, depth: int = 3) -> bool:
    """``obj`` holds the marker, three levels deep (str, bytes, containers, small objects)."""
    if isinstance(obj, str):
        return MARKER in obj
    if isinstance(obj, bytes | bytearray | memoryview):
        return MARKER_BYTES in bytes(obj)
    if depth == 0 or obj is None or isinstance(obj, int | float | bool | type):
        return False
    if isinstance(obj, dict):
        items = list(obj.items())[:SCAN_ITEMS]
        return any(carries(k, depth - 1) or carries(v, depth - 1) for k, v in items)
    if isinstance(obj, list | tuple | set | frozenset):
        return any(carries(x, depth - 1) for i, x in zip(range(SCAN_ITEMS), obj, strict=False))
    attrs = _attrs(obj)
    return attrs is not None and any(carries(v, depth - 1) for v in attrs)


def _attrs(obj: Any) -> list[Any] | None:
    names: list[str] = list(getattr(obj, "__dict__", {}) or ())
    for klass in type(obj).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    if not names:  # a record of a C extension (aiokafka's DefaultRecord): its fields
        names = [n for n, v in vars(type(obj)).items() if not n.startswith("_")
                 and isinstance(v, GetSetDescriptorType | MemberDescriptorType)]
    if not names or len(names) > SCAN_ATTRS:
        return None
    return [getattr(obj, n, None) for n in names]


@dataclass
class Step:
    caller: CodeType | None
    callee: CodeType
    kind: str  # "function", "closure" or "method"


class Walk:
    """The profile hook and what it saw."""

    def __init__(self) -> None:
        self.rooms: dict[CodeType, str | None] = {}
        self.starts: dict[CodeType, int] = {}
        self.steps: list[Step] = []
        self.begun = False
        self.ended = False
        self.carrying: set[int] = set()  # ids of the frames of carrying calls, while they run
        self.frames: list[FrameType] = []  # kept alive so that their ids are not reused

    def room(self, code: CodeType) -> str | None:
        r = self.rooms.get(code, "?")
        if r == "?":
            r = self.rooms[code] = room_of(code.co_filename)
        return r

    def _fresh(self, frame: FrameType) -> bool:
        """A call, not a coroutine's or generator's resumption: at its first RESUME."""
        code = frame.f_code
        first = self.starts.get(code)
        if first is None:
            first = next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"),
                         0)
            self.starts[code] = first
        return frame.f_lasti <= first

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or self.ended:
            return
        code = frame.f_code
        room = self.room(code)
        if room is None:
            if self.begun and code.co_name == "send_batch" and id(frame.f_back) in self.carrying:
                self.ended = True
            return
        if not self._fresh(frame):
            return
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        local = frame.f_locals
        if not any(carries(local.get(n)) for n in names if n not in ("self", "cls")):
            return
        caller = frame.f_back
        while caller is not None and self.room(caller.f_code) is None:
            caller = caller.f_back
        if not self.begun:
            if caller is None or caller.f_code.co_name != "poll" or \
                    self.room(caller.f_code) != "runtime/kafka":
                return
            self.begun = True
        kind = "method" if "self" in names[:1] or "cls" in names[:1] else \
            "closure" if "<locals>" in code.co_qualname or code.co_name == "<lambda>" \
            else "function"
        self.steps.append(Step(caller.f_code if caller is not None else None, code, kind))
        self.carrying.add(id(frame))
        self.frames.append(frame)

    def on(self) -> None:
        threading.setprofile(self.hook)
        sys.setprofile(self.hook)

    def off(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)


# -- the job ---------------------------------------------------------------------------------------

#: (key, event time in s): the marker's pane [0, 10 s) closes when k2's message at 25 s moves
#: the watermark past it
MESSAGES = [("k1", 1.0), (MARKER, 2.0), ("k2", 3.0), ("k1", 4.0), ("k2", 25.0)]


def walk_app(name: str, bootstrap: str, events: str, counts: str) -> StreamApplication:
    app = StreamApplication(name, config={"task.commit.ms": 1000})
    kafka = KafkaSystem("kafka", bootstrap_servers=bootstrap)
    kv = KVSerde(StringSerde(), JsonSerde())
    inp = app.input(kafka.input("events", serde=kv, physical_name=events))
    out = app.output(kafka.output("counts", serde=kv, physical_name=counts))
    window = Windows.keyed_tumbling(lambda m: m.key, timedelta(seconds=10), init=lambda: 0,
                                    fold=lambda m, n: n + 1, event_time=lambda m: m.value["ts"])
    (inp.window(window, name="counts")
        .map(lambda p: KV(p.key.key, {"pane": p.key.pane_id, "count": p.message}), name="row")
        .send_to(out))
    return app


async def _load(bootstrap: str, topic: str) -> None:
    """Each message in a batch of its own (tansu's end offset is its last batch's base + 1)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, ts in MESSAGES:
            await producer.send_and_wait(topic, key=key.encode(),
                                         value=_JSON.serialize({"ts": ts}), partition=0)
    finally:
        await producer.stop()


async def _read(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got = await consumer.getmany(timeout_ms=3000)
        return [(r.key, r.value) for r in got.get(tp, []) if not r.headers]
    finally:
        await consumer.stop()


def run(broker_kind: str) -> Walk:
    tag = uuid.uuid4().hex[:8]
    events, counts = f"walk-events-{tag}", f"walk-counts-{tag}"
    job_dir = tempfile.mkdtemp(prefix="walk-")
    broker = start_broker(broker_kind)
    walk = Walk()
    try:
        bootstrap = broker.bootstrap
        asyncio.run(ensure_topics(bootstrap, [TopicSpec(events, 1), TopicSpec(counts, 1)]))
        asyncio.run(_load(bootstrap, events))
        runner = LocalRunner(walk_app(f"walk-{tag}", bootstrap, events, counts),
                             {"job.dir": job_dir,
                              "job.processing.guarantee": "at-least-once"})
        walk.on()
        try:
            runner.run()
        finally:
            walk.off()
        out = asyncio.run(_read(bootstrap, counts))
    finally:
        broker.stop()
        shutil.rmtree(job_dir, ignore_errors=True)
    if not any(k == MARKER_BYTES and b'"count":1' in v.replace(b" ", b"") for k, v in out):
        raise SystemExit(f"message_walk: the output topic {counts!r} holds no count of "
                         f"{MARKER!r} ({len(out)} records): the pane was not written")
    if not walk.begun or not walk.ended:
        raise SystemExit(f"message_walk: the walk of {MARKER!r} was not seen from the consumer's "
                         f"poll to the producer's send_batch (begun={walk.begun}, "
                         f"ended={walk.ended}): the code's names differ from those looked for")
    return walk


# -- the report ----------------------------------------------------------------------------------

def _name(walk: Walk, code: CodeType | None) -> str:
    if code is None:
        return "(event loop)"
    if walk.room(code) == APP:
        return f"{APP} {code.co_qualname}"
    return f"{Path(code.co_filename).resolve().relative_to(ROOT)}:{code.co_qualname}"


def _rooms_in_order(walk: Walk) -> Iterator[str]:
    last = None
    for step in walk.steps:
        for code in (step.caller, step.callee):
            room = walk.room(code) if code is not None else None
            if room is None or room in (APP, last):
                continue
            last = room
            yield room


def report(walk: Walk, show_steps: bool) -> None:
    order = list(_rooms_in_order(walk))
    files: dict[str, set[str]] = {}
    for step in walk.steps:
        for code in (step.caller, step.callee):
            room = walk.room(code) if code is not None else None
            if room is not None and room != APP and code is not None:
                rel = Path(code.co_filename).resolve().relative_to(ROOT)
                files.setdefault(room, set()).add(str(rel))
    print(f"tree: {ROOT}")
    print(f"steps (carrying calls): {len(walk.steps)}")
    print(f"rooms in order ({len(order)} stays): " + " -> ".join(order))
    print(f"distinct rooms: {len(files)}")
    for room in sorted(files, key=lambda r: (-(floor_of(r) or 0), r)):
        print(f"  {room} (floor {floor_of(room)}): {', '.join(sorted(files[room]))}")
    climbs = []
    for step in walk.steps:
        if step.caller is None:
            continue
        a, b = walk.room(step.caller), walk.room(step.callee)
        fa = floor_of(a) if a is not None else None
        fb = floor_of(b) if b is not None else None
        if fa is not None and fb is not None and fb > fa:
            how = "a callback handed down" if step.kind != "method" else \
                "a method of an object handed down"
            climbs.append(f"  {a} ({fa}) -> {b} ({fb}): {_name(walk, step.caller)} -> "
                          f"{_name(walk, step.callee)}, {how}")
    distinct = sorted(set(climbs))
    print(f"climbs back up: {len(distinct)} distinct ({len(climbs)} steps)")
    for line in distinct:
        print(line)
    if show_steps:
        print("steps:")
        for step in walk.steps:
            print(f"  {_name(walk, step.caller)} -> {_name(walk, step.callee)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", choices=BROKERS, default="tansu")
    parser.add_argument("--steps", action="store_true", help="print every step too")
    args = parser.parse_args(argv)
    report(run(args.broker), args.steps)


if __name__ == "__main__":
    main()
