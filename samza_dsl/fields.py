"""What a function reads of its arguments, from its bytecode.

The Spark runner uses this to read a named field as a column, where a user wrote a function
that only reads it (``lambda v: v["country"]``), and to carry through a shuffle only the fields
the pass after it reads. Nothing here ever changes what a function computes: where the answer
is not certain, it is None, and the runner takes every field and calls the function.

The analysis runs the function's code over abstract values, instruction by instruction:

- a *reference* is a path into an argument: ``m["a"].b`` is argument 0 with the steps
  ``("item", "a")``, ``("attr", "b")``;
- a reference is *used* when its value is taken as a whole: compared, computed with, passed to
  a function that is not followed, returned, built into a container, or a method of it called;
- a plain Python function called with references (a module-level helper such as
  ``view_ts(kv.value)``) is followed, up to ``MAX_DEPTH`` calls deep;
- ``Field`` (a declared field) and ``operator.itemgetter`` of one item are item reads.

Code with any jump (``if``, loops, ``and``/``or``, comprehensions, ``try``), keyword arguments,
star-arguments, an argument captured by an inner function, generators and coroutines, and any
instruction not listed in ``_run`` give None. So the answers hold for straight-line functions,
the shape of key, event-time and fold functions that read fields.

>>> field_path(lambda v: v["country"])
(('item', 'country'),)
>>> sorted(reads(lambda m, acc: acc + m["bytes"] * 2, 2)[0])
[(('item', 'bytes'),)]
>>> reads(lambda m: str(m), 1)
[frozenset({()})]
"""

from __future__ import annotations

import builtins
import dis
import inspect
import operator
import sys
import types
from collections.abc import Callable
from typing import Any, cast

from samza_dsl.aggregate import Field

__all__ = ["Step", "Path", "field_path", "fast_reader", "reads", "ignores", "row_fields", "kv_value_fields", "MAX_DEPTH"]

#: one step of a path: ("item", key) for ``x[key]``, ("attr", name) for ``x.name``
Step = tuple[str, Any]
Path = tuple[Step, ...]

#: how many calls deep a helper function is followed
MAX_DEPTH = 3

_SKIP = frozenset({"RESUME", "NOP", "CACHE", "PRECALL", "EXTENDED_ARG", "COPY_FREE_VARS",
                   "MAKE_CELL"})
_TWO = frozenset({"BINARY_OP", "COMPARE_OP", "IS_OP", "CONTAINS_OP"})
_ONE = frozenset({"UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT", "UNARY_POSITIVE", "TO_BOOL",
                  "GET_LEN"})
_BUILD = frozenset({"BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_STRING"})
_NOT_FOLLOWED = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
                 | inspect.CO_VARARGS | inspect.CO_VARKEYWORDS | inspect.CO_ITERABLE_COROUTINE)
#: CALL's stack: 3.13 puts the callable below its self-or-NULL, 3.11 and 3.12 above
_CALLABLE_ON_TOP = sys.version_info < (3, 13)


class _Ref:
    __slots__ = ("root", "path")

    def __init__(self, root: int, path: Path) -> None:
        self.root = root
        self.path = path


class _Const:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Global:
    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class _Unknown(Exception):
    """The code does something the analysis does not follow."""


_NULL = object()  # the NULL CALL takes below (or above) a plain callable
_OTHER = object()  # any value that is not a reference into an argument


def _item_read(fn: Any) -> str | None:
    """The key a one-item ``operator.itemgetter`` or a ``Field`` reads, else None."""
    if type(fn) is Field:
        return fn.name
    if type(fn) is operator.itemgetter:
        reduced: Any = fn.__reduce__()
        items: tuple[Any, ...] = reduced[1] if isinstance(reduced, tuple) else ()
        if len(items) == 1 and type(items[0]) in (str, int):
            return cast(str, items[0])
    return None


class _Analysis:
    def __init__(self) -> None:
        #: (argument, path) of every reference used as a whole
        self.used: set[tuple[int, Path]] = set()
        self.calls = 0  # calls followed (a helper, a Field, an itemgetter)
        self.result: Any = None  # the abstract result, once run

    def use(self, v: Any) -> None:
        if type(v) is _Ref:
            self.used.add((v.root, v.path))

    def call(self, fn: Any, args: list[Any], depth: int) -> Any:
        """The abstract result of ``fn(*args)``; the arguments it uses are recorded."""
        key = _item_read(fn)
        if key is not None and len(args) == 1:
            self.calls += 1
            a = args[0]
            if type(a) is _Ref:
                return _Ref(a.root, (*a.path, ("item", key)))
            self.use(a)
            return _OTHER
        if type(fn) is types.FunctionType and depth < MAX_DEPTH:
            code = fn.__code__
            if not code.co_flags & _NOT_FOLLOWED and not code.co_kwonlyargcount \
                    and code.co_argcount == len(args):
                self.calls += 1
                return self.run(fn, args, depth + 1)
        for a in args:
            self.use(a)
        return _OTHER

    def run(self, fn: types.FunctionType, args: list[Any], depth: int) -> Any:
        """Runs ``fn``'s code over the abstract ``args``; returns the abstract result."""
        code = fn.__code__
        names = code.co_varnames
        if set(names[:code.co_argcount]) & set(code.co_cellvars):
            raise _Unknown("an argument is captured by an inner function")
        local: dict[str, Any] = dict(zip(names, args, strict=False))
        stack: list[Any] = []
        pop, push = stack.pop, stack.append
        kw = False
        for ins in dis.get_instructions(fn):
            op = ins.opname
            if op in _SKIP:
                continue
            if op in ("LOAD_FAST", "LOAD_FAST_CHECK"):
                if ins.argval not in local:
                    raise _Unknown("a local read before it is set")
                push(local[ins.argval])
            elif op == "LOAD_FAST_LOAD_FAST":
                for name in ins.argval:
                    if name not in local:
                        raise _Unknown("a local read before it is set")
                    push(local[name])
            elif op == "STORE_FAST":
                local[ins.argval] = pop()
            elif op == "LOAD_CONST":
                push(_Const(ins.argval))
            elif op == "RETURN_CONST":
                return _Const(ins.argval)
            elif op == "RETURN_VALUE":
                return pop()
            elif op == "POP_TOP":
                pop()
            elif op == "PUSH_NULL":
                push(_NULL)
            elif op == "LOAD_GLOBAL":
                if ins.arg is not None and ins.arg & 1:
                    push(_NULL)
                g = fn.__globals__
                if ins.argval in g:
                    push(_Global(g[ins.argval]))
                elif hasattr(builtins, ins.argval):
                    push(_Global(getattr(builtins, ins.argval)))
                else:
                    raise _Unknown(f"no global {ins.argval!r}")
            elif op in ("LOAD_DEREF", "LOAD_CLOSURE"):
                push(_OTHER)
            elif op == "BINARY_SUBSCR":
                index, obj = pop(), pop()
                if type(obj) is _Ref and type(index) is _Const \
                        and type(index.value) in (str, int):
                    push(_Ref(obj.root, (*obj.path, ("item", index.value))))
                else:
                    self.use(obj)
                    self.use(index)
                    push(_OTHER)
            elif op == "LOAD_ATTR" and not (sys.version_info >= (3, 12) and ins.arg is not None
                                            and ins.arg & 1):
                obj = pop()
                if type(obj) is _Ref:
                    push(_Ref(obj.root, (*obj.path, ("attr", ins.argval))))
                elif type(obj) is _Global and isinstance(obj.value, types.ModuleType) \
                        and hasattr(obj.value, ins.argval):
                    push(_Global(getattr(obj.value, ins.argval)))
                else:
                    self.use(obj)
                    push(_OTHER)
            elif op in ("LOAD_ATTR", "LOAD_METHOD"):  # a method: its object is used whole
                self.use(pop())
                push(_OTHER)
                push(_OTHER)
            elif op == "KW_NAMES":
                kw = True
            elif op == "CALL":
                n = ins.arg or 0
                args = [pop() for _ in range(n)][::-1]
                if _CALLABLE_ON_TOP:
                    callee, below = pop(), pop()
                else:
                    below, callee = pop(), pop()
                if below is not _NULL or kw or type(callee) is not _Global:
                    for a in (callee, below, *args):
                        self.use(a)
                    push(_OTHER)
                else:
                    push(self.call(callee.value, args, depth))
                kw = False
            elif op in _TWO:
                b, a = pop(), pop()
                self.use(a)
                self.use(b)
                push(_OTHER)
            elif op in _ONE:
                self.use(pop())
                push(_OTHER)
            elif op in _BUILD:
                for _ in range(ins.arg or 0):
                    self.use(pop())
                push(_OTHER)
            elif op == "BUILD_MAP":
                for _ in range(2 * (ins.arg or 0)):
                    self.use(pop())
                push(_OTHER)
            elif op == "FORMAT_VALUE":
                if (ins.arg or 0) & 0x04:
                    self.use(pop())
                self.use(pop())
                push(_OTHER)
            elif op == "COPY":
                push(stack[-(ins.arg or 1)])
            elif op == "SWAP":
                i = ins.arg or 1
                stack[-1], stack[-i] = stack[-i], stack[-1]
            else:
                raise _Unknown(f"instruction {op}")
        raise _Unknown("no return")


def _analyse(fn: Any, nargs: int) -> _Analysis | None:
    """The analysis of ``fn`` called with ``nargs`` arguments (its ``result``: the abstract
    result), or None where it does not follow ``fn``."""
    a = _Analysis()
    args: list[Any] = [_Ref(i, ()) for i in range(nargs)]
    try:
        if type(fn) is not types.FunctionType:
            result = a.call(fn, args, 0) if _item_read(fn) is not None else None
            if result is None:
                return None
        else:
            code = fn.__code__
            if code.co_flags & _NOT_FOLLOWED or code.co_kwonlyargcount \
                    or code.co_argcount != nargs:
                return None
            result = a.run(fn, args, 0)
    except (_Unknown, IndexError, TypeError, ValueError, AttributeError, RecursionError):
        return None
    a.result = result
    return a


def field_path(fn: Callable[..., Any] | None) -> Path | None:
    """The path ``fn(m)`` reads when that is all it does (``lambda v: v["country"]``, a
    ``Field``, a helper that returns ``m["a"]["b"]``), else None. The path may be empty
    (``lambda m: m``)."""
    if fn is None:
        return None
    found = _analyse(fn, 1)
    if found is None or type(found.result) is not _Ref or found.used:
        return None
    return found.result.path


def fast_reader(fn: Any) -> Callable[[Any], Any] | None:
    """For a plain function whose whole work is one item or attribute read of its argument
    (``lambda m: m["ts"]``, ``lambda kv: kv.key``; no call to anything): the
    ``operator.itemgetter`` or ``attrgetter`` that reads it the same way (the same
    ``__getitem__`` or attribute lookup, the same result and errors) without running a Python
    frame. Else None."""
    if type(fn) is not types.FunctionType:
        return None
    found = _analyse(fn, 1)
    if found is None or type(found.result) is not _Ref or found.used or found.calls \
            or len(found.result.path) != 1:
        return None
    kind, key = found.result.path[0]
    return operator.itemgetter(key) if kind == "item" else operator.attrgetter(key)


def reads(fn: Callable[..., Any] | None, nargs: int) -> list[frozenset[Path]] | None:
    """For each of ``fn``'s ``nargs`` arguments, the paths whose values it may use as a whole
    (the empty path: the argument itself), or None where the analysis does not follow ``fn``.
    An argument it never reads has no paths."""
    if fn is None:
        return None
    found = _analyse(fn, nargs)
    if found is None:
        return None
    result, used = found.result, found.used
    if type(result) is _Ref:
        used = {*used, (result.root, result.path)}
    return [frozenset(p for root, p in used if root == i) for i in range(nargs)]


#: names through which a function may reach its frame's variables without naming them
_FRAME_NAMES = frozenset({"locals", "vars", "eval", "exec", "globals", "sys", "inspect",
                          "_getframe", "currentframe", "f_locals", "f_back"})


def ignores(fn: Any, index: int, nargs: int) -> bool:
    """Whether plain function ``fn`` of ``nargs`` positional arguments never reads its argument
    ``index`` (as ``lambda _m, n: n + 1`` its first): no instruction loads, stores or deletes
    it, no inner function captures it, and the code names nothing that reaches its frame
    (``locals``, ``sys._getframe``...). Then any value in its place gives the same result.
    False where that is not certain."""
    if type(fn) is not types.FunctionType:
        return False
    code = fn.__code__
    if code.co_argcount != nargs or code.co_kwonlyargcount or code.co_flags & _NOT_FOLLOWED \
            or not 0 <= index < nargs:
        return False
    name = code.co_varnames[index]
    if name in code.co_cellvars or _FRAME_NAMES.intersection(code.co_names):
        return False
    for ins in dis.get_instructions(code):
        if "FAST" in ins.opname or "DEREF" in ins.opname or "CELL" in ins.opname \
                or "CLOSURE" in ins.opname:
            val = ins.argval
            if val == name or (isinstance(val, tuple) and name in val):
                return False
    return True


def row_fields(paths: frozenset[Path]) -> set[str] | None:
    """The top-level fields of a dict message the ``paths`` read, or None where one of them
    needs the message whole or reads it otherwise than by a string key."""
    out: set[str] = set()
    for p in paths:
        if not p or p[0][0] != "item" or type(p[0][1]) is not str:
            return None
        out.add(p[0][1])
    return out


def kv_value_fields(paths: frozenset[Path]) -> set[str] | None:
    """As ``row_fields`` for a ``KV`` whose value is a dict: the value's fields the ``paths``
    read (its key is free), or None where one needs the value whole, or the KV whole. A
    ``Field`` reads a KV's value: its item step is taken as the value's."""
    out: set[str] = set()
    for p in paths:
        if not p:
            return None
        step = p[0]
        if step == ("attr", "key"):
            continue
        if step == ("attr", "value"):
            if len(p) < 2 or p[1][0] != "item" or type(p[1][1]) is not str:
                return None
            out.add(p[1][1])
        elif step[0] == "item" and type(step[1]) is str:  # a Field of the KV: its value's
            out.add(step[1])
        else:
            return None
    return out
