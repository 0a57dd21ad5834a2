"""``samza_dsl.fields``: what a function reads of its arguments, from its bytecode.

The answers are used to read a field as a column and to carry only the fields a pass reads, so
the one thing they must never be is wrong: a function given only the fields ``reads`` names
computes what it computes on the whole message. A property checks that over a catalogue of key,
event-time and fold functions, and every function the analysis does not follow gives None."""

from __future__ import annotations

import math
import operator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from samza_dsl import KV
from samza_dsl.aggregate import Field
from samza_dsl.fields import field_path, ignores, kv_value_fields, reads, row_fields

TS = Field("ts")
B = Field("b")


def country(view: dict[str, Any]) -> str:
    return view["country"]


def ts_of(view: dict[str, Any]) -> float:
    return view["ts"]


def kv_ts(kv: KV[Any, Any]) -> float:
    return ts_of(kv.value)


def nested(m: dict[str, Any]) -> Any:
    return m["a"]["b"]


def bucket(m: dict[str, Any]) -> int:
    ms = round(m["ts"] * 1000)
    return ms - ms % 10_000


def with_default(m: dict[str, Any], scale: int = 2) -> Any:
    return m["ts"] * scale


def branchy(m: dict[str, Any]) -> Any:
    if m["a"]:
        return m["b"]
    return 0


def looping(m: dict[str, Any]) -> int:
    n = 0
    for _ in m["tags"]:
        n += 1
    return n


def generator(m: dict[str, Any]) -> Any:
    yield m["a"]


def star(*ms: Any) -> Any:
    return ms[0]["a"]


def captured(m: dict[str, Any]) -> Any:
    def inner() -> Any:
        return m
    return inner()["a"]


def test_field_reads_are_recognised() -> None:
    assert field_path(country) == (("item", "country"),)
    assert field_path(lambda v: v["country"]) == (("item", "country"),)
    assert field_path(nested) == (("item", "a"), ("item", "b"))
    assert field_path(kv_ts) == (("attr", "value"), ("item", "ts"))
    assert field_path(lambda kv: kv.key) == (("attr", "key"),)
    assert field_path(Field("ts")) == (("item", "ts"),)
    assert field_path(operator.itemgetter("ts")) == (("item", "ts"),)
    assert field_path(lambda m: m) == ()
    assert field_path(lambda kv: TS(kv.value)) == (("attr", "value"), ("item", "ts"))
    # a Field made in the call is not followed: the message is used whole
    assert reads(lambda kv: Field("ts")(kv.value), 1) == [frozenset({(("attr", "value"),)})]


def test_functions_that_do_more_than_read_a_field_have_no_path() -> None:
    for fn in (bucket, lambda m: m["ts"] * 1000, lambda m: str(m["k"]), lambda m: m.get("k"),
               lambda m: m["k"] if m else None, branchy, looping, generator, star, captured,
               operator.itemgetter("a", "b"), print, lambda m, n=1: m["k"], None):
        assert field_path(fn) is None, fn


def test_what_a_function_uses_of_each_argument() -> None:
    assert reads(lambda m, acc: acc + 1, 2) == [frozenset(), frozenset({()})]
    assert reads(lambda m, acc: acc + m["bytes"], 2) == [frozenset({(("item", "bytes"),)}),
                                                          frozenset({()})]
    assert reads(bucket, 1) == [frozenset({(("item", "ts"),)})]
    # a helper whose default is not given is not followed: its argument is used whole
    assert reads(lambda m: with_default(m), 1) == [frozenset({()})]
    assert reads(lambda m: with_default(m, 3), 1) == [frozenset({(("item", "ts"),)})]
    assert reads(lambda m: math.floor(m["ts"]), 1) == [frozenset({(("item", "ts"),)})]
    assert reads(lambda m: f"{m['a']}:{m['b']!r:>4}", 1) == [
        frozenset({(("item", "a"),), (("item", "b"),)})]
    assert reads(lambda m: m.get("a"), 1) == [frozenset({()})]  # a method: the whole dict
    assert reads(lambda kv: kv.value.get("a"), 1) == [frozenset({(("attr", "value"),)})]
    for fn in (branchy, looping, generator, captured, lambda m: {**m}, lambda m, *, k: m[k]):
        assert reads(fn, 1) is None, fn
    assert reads(star, 1) is None
    assert reads(country, 2) is None  # called with another count of arguments


def test_paths_as_fields() -> None:
    assert row_fields(frozenset({(("item", "a"),), (("item", "b"), ("attr", "x"))})) == {"a", "b"}
    assert row_fields(frozenset({()})) is None
    assert row_fields(frozenset({(("attr", "a"),)})) is None
    assert row_fields(frozenset({(("item", 0),)})) is None
    assert kv_value_fields(frozenset({(("attr", "key"),), (("attr", "value"), ("item", "ts"))})) \
        == {"ts"}
    assert kv_value_fields(frozenset({(("item", "ts"),)})) == {"ts"}  # a Field of the KV
    assert kv_value_fields(frozenset({(("attr", "value"),)})) is None
    assert kv_value_fields(frozenset({()})) is None
    assert kv_value_fields(frozenset({(("attr", "value"), ("attr", "ts"))})) is None
    assert kv_value_fields(frozenset()) == set()


# -- soundness: the fields ``reads`` names are all a function needs --------------------------

FOLDS = [
    lambda kv, acc: acc + 1,
    lambda kv, acc: acc + kv.value["a"],
    lambda kv, acc: max(acc, kv.value["a"] * 2 - kv.value["b"]),
    lambda kv, acc: (acc + len(kv.value["s"])) % 97,
    lambda kv, acc: acc + (kv.key == kv.value["s"]),
    lambda kv, acc: acc + hash((kv.value["a"], kv.value["c"])) % 3,
    lambda kv, acc: acc + round(B(kv) * 10),
    lambda kv, acc: acc + str(kv.value["a"]).count("1"),
    lambda kv, acc: acc + len(str(kv.value)),  # the whole value: every field
    lambda kv, acc: acc + len(repr(kv)),  # the whole message
    lambda kv, acc: acc + abs(kv.value["a"]) // 3,
]
KEYS_AND_TIMES = [
    lambda kv: kv.key,
    lambda kv: kv.value["s"],
    lambda kv: kv_ts(kv),
    lambda kv: kv.value["b"] / 4,
    lambda kv: (kv.value["s"], kv.key),
    lambda kv: f"{kv.value['c']}-{kv.key}",
    Field("c"),
]


@st.composite
def messages(draw: Any) -> KV[str, dict[str, Any]]:
    value = {"a": draw(st.integers(-1000, 1000)), "b": draw(st.floats(-1e6, 1e6)),
             "c": draw(st.sampled_from(["x", "y", "z"])), "s": draw(st.text(max_size=5)),
             "ts": draw(st.floats(0, 1e9)), "unused": draw(st.lists(st.integers(), max_size=3))}
    return KV(draw(st.text(max_size=3)), value)


def _pruned(kv: KV[str, dict[str, Any]], fields: set[str]) -> KV[str, dict[str, Any]]:
    return KV(kv.key, {k: v for k, v in kv.value.items() if k in fields})


@settings(max_examples=200, deadline=None)
@given(m=messages(), acc=st.integers(-50, 50), fold=st.sampled_from(FOLDS),
       fn=st.sampled_from(KEYS_AND_TIMES))
def test_a_message_pruned_to_the_fields_read_gives_the_same_results(
        m: KV[str, dict[str, Any]], acc: int, fold: Any, fn: Any) -> None:
    for f, args in ((fold, (m, acc)), (fn, (m,))):
        paths = reads(f, len(args))
        assert paths is not None
        fields = kv_value_fields(paths[0])
        if fields is None:
            continue  # the whole message: nothing is pruned
        assert f(_pruned(m, fields), *args[1:]) == f(*args)
    read = kv_value_fields(reads(fold, 2)[0])  # type: ignore[index]
    if fold is FOLDS[0]:
        assert read == set()
    if fold in FOLDS[-3:-1]:
        assert read is None


# -- a fold that never reads its message -------------------------------------------------------

def _count(_view: Any, n: int) -> int:
    return n + 1


def _reads_view(view: Any, n: int) -> int:
    return n + view["bytes"]


def _rebinds(view: Any, n: int) -> int:
    view = 1
    return n + view


def _captures(view: Any, n: int) -> int:
    return n + (lambda: len(view))()


def _frame(_view: Any, n: int) -> int:
    return n + len(locals())


def _getframe(_view: Any, n: int) -> int:
    import sys
    return n + len(sys._getframe().f_locals)


def _star(*args: Any) -> int:
    return int(args[1]) + 1


class _Callable:
    def __call__(self, _view: Any, n: int) -> int:
        return n + 1


def test_a_fold_that_never_reads_its_message_is_known_and_no_other_is() -> None:
    assert ignores(_count, 0, 2)
    assert ignores(lambda _m, n: n + 1, 0, 2)
    assert not ignores(_count, 1, 2)  # it reads its accumulator
    for fn in (_reads_view, _rebinds, _captures, _frame, _getframe, _star, _Callable(),
               operator.add, None):
        assert not ignores(fn, 0, 2), fn
    assert not ignores(_count, 0, 3)  # another number of arguments than it takes
