"""samza_dsl.json_text: the nesting depth of a JSON text counted as a decoder nests, the one limit
every reader applies, and what is wrong with a text that holds a lone UTF-16 surrogate."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from samza_dsl.errors import SerdeError
from samza_dsl.json_text import MAX_JSON_DEPTH, check_json_depth, explain_json_error, json_depth
from samza_dsl.serdes import JsonSerde

# strings full of what a bracket count could be fooled by: brackets, quotes, backslashes
TRICKY = st.text(alphabet='[]{}"\\ab\u00e9', max_size=6)
JSON = st.recursive(st.none() | st.integers() | TRICKY,
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(TRICKY, inner, max_size=3), max_leaves=30)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(JSON, st.booleans())
def test_the_depth_of_a_text_is_the_depth_of_its_value(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert json_depth(text) == depth(value), text


def at_stack_depth(frames: int, call: Any) -> Any:
    return call() if frames == 0 else at_stack_depth(frames - 1, call)


def nested(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def test_the_limit_is_the_same_wherever_the_stack_is() -> None:
    # msgspec alone decodes as deep as the stack leaves room for: the limit was the stack's
    serde = JsonSerde()
    for frames in (0, 300, 600):
        assert at_stack_depth(frames, lambda: serde.deserialize(nested(MAX_JSON_DEPTH))) \
            is not None
        with pytest.raises(SerdeError, match=rf"nested {MAX_JSON_DEPTH + 1} levels deep"):
            at_stack_depth(frames, lambda: serde.deserialize(nested(MAX_JSON_DEPTH + 1)))
    with pytest.raises(SerdeError, match=r"nested 985 levels deep .* more than the 200 levels"):
        serde.deserialize(nested(985))
    with pytest.raises(SerdeError, match=r"nested 201 levels deep"):
        serde.deserialize_batch([b"1", nested(MAX_JSON_DEPTH + 1)])
    # what JsonSerde writes, it reads: a value past the limit is refused when it is written
    value: Any = 1
    for _ in range(MAX_JSON_DEPTH + 1):
        value = [value]
    with pytest.raises(SerdeError, match=r"cannot encode list: it is nested 201 levels deep"):
        serde.serialize(value)
    with pytest.raises(SerdeError, match=r"nested 201 levels deep"):
        serde.serialize_batch([1, value])
    assert check_json_depth(nested(MAX_JSON_DEPTH)) is None
    # many brackets side by side are not deep
    assert check_json_depth(b"[" + b",".join([b'{"a": [1]}'] * 1000) + b"]") is None


@pytest.mark.parametrize(("text", "escape", "byte"), [
    (b'"\\ud800"', "\\ud800", 2),                  # a high half at the end of a string
    (b'{"a": "x\\udc00y"}', "\\udc00", 9),         # a low half alone
    (b'["\\ud83d\\u0041"]', "\\ud83d", 3),          # a high half before another escape
    (b'["\\ud83d", "\\ude00"]', "\\ud83d", 3),      # halves in two strings are no pair
])
def test_a_lone_surrogate_is_named_with_its_byte(text: bytes, escape: str, byte: int) -> None:
    with pytest.raises(msgspec.DecodeError) as info:
        msgspec.json.decode(text)
    why = explain_json_error(text, info.value)
    assert why.startswith(f"a lone UTF-16 surrogate {escape} at byte {byte}: "), why
    assert "Fix the producer" in why
    with pytest.raises(SerdeError, match=rf"lone UTF-16 surrogate \{escape} at byte {byte}"):
        JsonSerde().deserialize(text)


def test_a_pair_and_an_escaped_backslash_are_not_lone_surrogates() -> None:
    for text in (b'"\\ud83d\\ude00', b'"\\\\ud800 is text" x'):
        assert explain_json_error(text, "the decoder's own reason") == "the decoder's own reason"
