r"""JSON text as samza-dsl reads it: the limits on a message's nesting and on a JSON Lines line,
and errors that say what is wrong with a text.

The limits are explicit so that every reader applies the same one. msgspec decodes JSON
recursively under Python's recursion limit (1000 frames, counting the caller's), so without
them how deep a message may be depended on how deep the stack already was: ``samza-dsl load``
took arrays nested 997 deep that ``samza-dsl run``, decoding them further down its stack,
rejected as poison at 985. Now ``load``, ``run --input``, ``JsonSerde`` (decoding and encoding)
and ``samza-dsl reprocess`` all refuse a message nested more than ``MAX_JSON_DEPTH`` levels, by
the same count, and what passes decodes at any depth of the stack.

>>> json_depth(b'{"a": [1, [2, "]]]"]], "b": {}}')
3
>>> check_json_depth(b"[" * 300 + b"]" * 300).split(",")[0]
'nested 300 levels deep (arrays and objects within each other)'
>>> explain_json_error(b'{"name": "\ud800"}', "Input data was truncated").split(":")[0]
'a lone UTF-16 surrogate \\ud800 at byte 11'
"""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from itertools import accumulate, repeat

__all__ = ["MAX_JSON_DEPTH", "MAX_JSON_LINE_BYTES", "any_too_deep", "check_json_depth",
           "explain_json_error", "json_depth"]

#: The deepest a JSON message may nest (arrays and objects within each other, the outermost
#: counting 1), in a JSON Lines file and in a stream with ``JsonSerde``. Real messages nest
#: tens of levels; this leaves the decoders four fifths of Python's recursion limit.
MAX_JSON_DEPTH = 200
#: The longest line of a JSON Lines file ``samza-dsl load`` and ``run --input`` read: 16 MiB.
#: A longer one is refused before it is read whole (decoded, a line takes about five times its
#: size in memory).
MAX_JSON_LINE_BYTES = 16 * 1024 * 1024

# each bracket as a step: an opening one 2, a closing one 0 (so that a step minus 1 is +1 or -1)
_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_NOT_SYNTAX = bytes(b for b in range(256) if b not in b'[]{}"')
# a text this short cannot nest past the limit: each level takes two bytes
_SHALLOW = 2 * MAX_JSON_DEPTH + 1
_ESCAPE = re.compile(rb"\\(u[0-9a-fA-F]{4}|.)", re.S)


def json_depth(text: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (0 for a scalar), brackets inside
    strings not counted. All in C but the last step, over the brackets alone."""
    if b"\\" in text:  # escaped backslashes first, then escaped quotes: neither ends a string
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    quoted = text.translate(None, _NOT_SYNTAX).split(b'"')  # the strings at odd places
    steps = b"".join(quoted[::2]).translate(_STEPS)
    if not steps:
        return 0
    return int(max(map(operator.sub, accumulate(steps), range(1, len(steps) + 1))))


def check_json_depth(text: bytes) -> str | None:
    """What is wrong with a text nested more than ``MAX_JSON_DEPTH`` levels; None when it is
    not. Counts bytes, then brackets (in C), and looks closer only when there are that many."""
    if len(text) <= _SHALLOW or text.count(b"[") + text.count(b"{") <= MAX_JSON_DEPTH:
        return None
    depth = json_depth(text)
    if depth <= MAX_JSON_DEPTH:
        return None
    return (f"nested {depth} levels deep (arrays and objects within each other), more than the "
            f"{MAX_JSON_DEPTH} levels samza-dsl reads (samza_dsl.json_text.MAX_JSON_DEPTH): "
            f"flatten it")


def any_too_deep(texts: Sequence[bytes]) -> bool:
    """Whether any of ``texts`` nests more than ``MAX_JSON_DEPTH`` levels: a batch's check, with
    no Python frame per text unless one has that many brackets."""
    if not texts or max(map(len, texts)) <= _SHALLOW:
        return False
    opening = map(operator.add, map(bytes.count, texts, repeat(b"[")),
                  map(bytes.count, texts, repeat(b"{")))
    if max(opening) <= MAX_JSON_DEPTH:
        return False
    return any(check_json_depth(text) is not None for text in texts)


def explain_json_error(text: bytes, error: object) -> str:
    """What is wrong with a JSON text the decoder refused (``error``, its message): a lone UTF-16
    surrogate escape is named with its byte; anything else is the decoder's own message."""
    pending: re.Match[bytes] | None = None  # a high surrogate, waiting for its low half
    lone = None
    for m in _ESCAPE.finditer(text):
        unit = int(m.group(1)[1:], 16) if m.group(1)[:1] == b"u" else -1
        if pending is not None:
            if m.start() == pending.end() and 0xDC00 <= unit <= 0xDFFF:
                pending = None
                continue
            lone = pending
            break
        if 0xD800 <= unit <= 0xDBFF:
            pending = m
        elif 0xDC00 <= unit <= 0xDFFF:
            lone = m
            break
    lone = lone or pending
    if lone is None:
        return str(error)
    return (f"a lone UTF-16 surrogate {lone.group().decode()} at byte {lone.start() + 1}: JSON "
            f"writes a character beyond U+FFFF as a pair of escapes (\\ud83d\\ude00 is one "
            f"character), and half of a pair is no character. Fix the producer: it wrote text "
            f"that was not valid Unicode (in Python, a str holding a lone surrogate)")
