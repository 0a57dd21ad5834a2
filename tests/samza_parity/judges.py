"""How Samza's output and samza-dsl's are compared, shape by shape, as Samza defines equality.

Samza orders a task's output as the task processed its input, one input partition at a time in
offset order; it fixes nothing between partitions, between two inputs of a task, or across an
intermediate stream written by several tasks. A message's key fixes its output partition. So:

- each output key must sit in one partition, the one the system's partitioner gives (Samza's
  in-memory system: ``abs(key.hashCode()) % partitions``; samza-dsl's systems: murmur2 of the
  serialized key, Kafka's producer), and the comparison is per key from there;
- ``sequence``: per key, the same messages in the same order (a key's messages come from one
  input partition through one task);
- ``per_origin``: per key and per input partition its values came from, the same sequence (a
  key the application gives gathers messages of several input partitions, several tasks);
- ``per_partition``: where the application chose each message's partition (the key does not
  fix it), per output partition and per input partition its values came from, the same
  sequence of messages: one task writes an input partition's messages in order, and several
  tasks' messages interleave freely in an output partition;
- ``tagged``: per key and per tag (the first letter of the value: which input of a ``merge`` it
  came through), the same sequence; the interleaving of the tags is free;
- ``multiset``: per key, the same messages in any order (``broadcast``: a message once per task
  of the job; ``async_flat_map`` completing out of order);
- ``counts``: per key, the same multiset of values and the counts 1..n (a running count after a
  ``partition_by`` whose stream is written by several tasks);
- ``panes``: per key (global windows: per input partition, as each task is one), the same early
  panes in the same order; at end-of-stream samza-dsl fires one DEFAULT pane per open pane,
  where Samza fires none in a job without intermediate streams, and in a job with one fires each
  trigger of the pane (its early one and its default one) in hash order: DEFAULT, or EARLY then
  DEFAULT (accumulating), or either alone (discarding) (docs/semantics.md, "Samza itself");
- ``join``: each side's output per key is one that some interleaving of the two inputs gives
  (the order between two input streams is free); where a key has at most one message a side the
  outputs are equal, and the last output of a key is always its last left and last right.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from operators.hashing import partition_for
from tests.samza_parity.samza_harness import Message


def java_hash(key: str) -> int:
    """Java's ``String.hashCode()``: what Samza's in-memory system partitions an unserialized
    key by (InMemorySystemProducer: ``Math.abs(hashCode) % partitions``)."""
    h = 0
    for unit in key.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def samza_partition(key: str, partitions: int) -> int:
    return abs(java_hash(key)) % partitions


def dsl_partition(key: str, partitions: int) -> int:
    return partition_for(key.encode(), partitions)


def check_placement(out: Sequence[Message], partitions: int,
                    place: Callable[[str, int], int], who: str) -> None:
    """Each keyed output message is in the partition its system's partitioner gives."""
    for m in out:
        if m.key is not None and m.partition >= 0:
            assert m.partition == place(m.key, partitions), (
                f"{who}: key {m.key!r} in partition {m.partition} of {partitions}, expected "
                f"{place(m.key, partitions)}")


def by_key(out: Iterable[Message]) -> dict[Any, list[Any]]:
    """Per key, its values in output order (partition by partition, in offset order)."""
    keyed: dict[Any, list[Any]] = defaultdict(list)
    for m in out:
        keyed[m.key].append(m.value)
    return dict(keyed)


def _key(value: Any) -> str:
    return repr(value)


def sequence(samza: Sequence[Message], dsl: Sequence[Message], _inputs: Any) -> None:
    assert by_key(dsl) == by_key(samza)


def per_origin(samza: Sequence[Message], dsl: Sequence[Message],
               origin: dict[Any, tuple[str, int]]) -> None:
    def split(out: Sequence[Message]) -> dict[tuple[Any, tuple[str, int]], list[Any]]:
        parts: dict[tuple[Any, tuple[str, int]], list[Any]] = defaultdict(list)
        for m in out:
            parts[(m.key, origin[m.value])].append(m.value)
        return dict(parts)
    assert split(dsl) == split(samza)


def per_partition(samza: Sequence[Message], dsl: Sequence[Message],
                  origin: dict[Any, tuple[str, int]]) -> None:
    def split(out: Sequence[Message]) -> dict[tuple[int, tuple[str, int]], list[Any]]:
        parts: dict[tuple[int, tuple[str, int]], list[Any]] = defaultdict(list)
        for m in out:
            parts[(m.partition, origin[m.value])].append((m.key, m.value))
        return dict(parts)
    assert split(dsl) == split(samza)


def tagged(samza: Sequence[Message], dsl: Sequence[Message], _inputs: Any) -> None:
    def split(out: Sequence[Message]) -> dict[tuple[Any, str], list[Any]]:
        parts: dict[tuple[Any, str], list[Any]] = defaultdict(list)
        for m in out:
            parts[(m.key, str(m.value)[0])].append(m.value)
        return dict(parts)
    assert split(dsl) == split(samza)


def multiset(samza: Sequence[Message], dsl: Sequence[Message], _inputs: Any) -> None:
    def bags(out: Sequence[Message]) -> dict[Any, Counter[str]]:
        return {k: Counter(map(_key, vs)) for k, vs in by_key(out).items()}
    assert bags(dsl) == bags(samza)


def counts(samza: Sequence[Message], dsl: Sequence[Message], _inputs: Any) -> None:
    def summary(out: Sequence[Message]) -> dict[Any, tuple[list[int], list[Any]]]:
        return {k: (sorted(v[0] for v in vs), sorted(v[1] for v in vs))
                for k, vs in by_key(out).items()}
    got = summary(dsl)
    assert got == summary(samza)
    for key, (ns, _) in got.items():
        assert ns == list(range(1, len(ns) + 1)), f"key {key!r}: counts {ns}"


def _dsl_panes(values: list[Any], accumulating: bool, early: int,
               repeating: bool) -> list[dict[str, Any]]:
    """The early panes of ``values`` (one key's, or one task's, in order) under
    repeat(count(early)), or count(early) once, and samza-dsl's DEFAULT pane at end-of-stream."""
    expected = []
    fired = 0
    for n in range(early, len(values) + 1 if repeating else min(early, len(values)) + 1,
                   early):
        expected.append({"firing": "EARLY", "values": values[0 if accumulating else fired:n]})
        fired = n
    rest = values if accumulating else values[fired:]
    return expected + ([{"firing": "DEFAULT", "values": rest}] if rest else [])


def _samza_end(rest: list[Any], accumulating: bool) -> list[list[dict[str, Any]]]:
    """What Samza may fire at end-of-stream for a pane holding ``rest`` (WindowOperatorImpl
    fires each of its trigger keys, early and default, in the order of a HashSet)."""
    if not rest:
        return [[]]
    default = {"firing": "DEFAULT", "values": rest}
    early = {"firing": "EARLY", "values": rest}
    return [[default], [early, default]] if accumulating else [[default], [early]]


def panes(early: int, accumulating: bool, keyed: bool, samza_fires_at_end: bool = False,
          repeating: bool = True) -> Callable[[Sequence[Message], Sequence[Message], Any], None]:
    """Samza's early panes equal samza-dsl's; at end-of-stream each fires as the module
    docstring says (``samza_fires_at_end``: the job has an intermediate stream)."""
    def judge(samza: Sequence[Message], dsl: Sequence[Message],
              inputs: dict[Any, list[Any]]) -> None:
        def grouped(out: Sequence[Message]) -> dict[Any, list[dict[str, Any]]]:
            if keyed:
                return by_key(out)
            # a global window is one per task: its panes are told apart by the input
            # partition their (distinct) values came from
            origin = {v: group for group, vs in inputs.items() for v in vs}
            per: dict[Any, list[dict[str, Any]]] = defaultdict(list)
            for m in out:
                per[origin[m.value["values"][0]]].append(m.value)
            return dict(per)
        samza_panes, dsl_panes = grouped(samza), grouped(dsl)
        for group, values in inputs.items():
            expected = _dsl_panes(values, accumulating, early, repeating)
            early_only = [p for p in expected if p["firing"] == "EARLY"]
            rest = [] if len(expected) == len(early_only) else expected[-1]["values"]
            ends = _samza_end(rest, accumulating) if samza_fires_at_end else [[]]
            assert samza_panes.get(group, []) in [early_only + end for end in ends], (
                f"Samza, {group!r}")
            assert dsl_panes.get(group, []) == expected, f"samza-dsl, {group!r}"
        assert set(samza_panes) <= set(inputs) and set(dsl_panes) <= set(inputs)
    return judge


def _interleavable(left: list[Any], right: list[Any], out: list[str]) -> bool:
    """Whether some interleaving of one key's left and right messages (each side in order)
    gives ``out`` under Samza's join: a message is stored, then joined with the other side's
    latest message, if any, left first."""
    reach = {(0, 0, 0)}
    for _ in range(len(left) + len(right)):
        step = set()
        for i, j, k in reach:
            if i < len(left):
                if j == 0:
                    step.add((i + 1, j, k))
                elif k < len(out) and out[k] == f"{left[i]}:{right[j - 1]}":
                    step.add((i + 1, j, k + 1))
            if j < len(right):
                if i == 0:
                    step.add((i, j + 1, k))
                elif k < len(out) and out[k] == f"{left[i - 1]}:{right[j]}":
                    step.add((i, j + 1, k + 1))
        reach = step
    return (len(left), len(right), len(out)) in reach


def join(samza: Sequence[Message], dsl: Sequence[Message],
         inputs: dict[str, dict[Any, list[Any]]]) -> None:
    left, right = inputs["left"], inputs["right"]
    for who, out in (("Samza", samza), ("samza-dsl", dsl)):
        for key, values in by_key(out).items():
            assert key in left and key in right, f"{who}: output for {key!r}"
            assert _interleavable(left[key], right[key], values), (
                f"{who}: {values} for {key!r} is no interleaving of {left[key]} and "
                f"{right[key]}")
            assert values[-1] == f"{left[key][-1]}:{right[key][-1]}", (who, key, values)
    for key in left.keys() & right.keys():
        assert key in by_key(samza) and key in by_key(dsl), f"no output for {key!r}"
    single = {k for k in left.keys() & right.keys() if len(left[k]) == len(right[k]) == 1}
    assert ({k: v for k, v in by_key(dsl).items() if k in single}
            == {k: v for k, v in by_key(samza).items() if k in single})
