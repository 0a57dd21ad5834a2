"""Declared aggregations: named fields and the aggregates of a window's pane.

A window declared with ``aggregate=Aggregate.count()`` (or ``sum``, ``min``, ``max``, ``mean``
of a named field) folds its panes as any window with ``init``/``fold`` does, on every runner:
the streaming runtime and ``TestRunner`` run the fold generated here; ``SparkRunner`` may run the
same aggregation in Spark SQL (docs/semantics.md, "Declared aggregations"). A pane's value is
defined the same everywhere:

- ``count()``: the number of the pane's messages, an ``int``;
- ``sum(f)``: the exact sum of the field's values: an ``int`` when they are all ints, else the
  ``float`` nearest the exact sum (so the order of the messages never changes it);
- ``mean(f)``: the ``float`` nearest the exact sum divided by the count;
- ``min(f)`` / ``max(f)``: the smallest / largest value (the first one on ties), as it was.

A field's value must be an ``int`` or a ``float`` (not a ``bool``, not None); ``sum`` and
``mean`` also refuse NaN and infinities, ``min`` and ``max`` refuse NaN. Anything else, or a
message without the field, is an error naming the aggregate and the field (and, from the window,
the operator): nothing is dropped. A pane always has at least one message (a pane without state
emits nothing), so no aggregate is ever taken over an empty pane.

>>> agg = Aggregate.mean("ms")
>>> acc = agg.init()
>>> for m in ({"ms": 1}, {"ms": 2.5}, {"ms": 3}):
...     acc = agg.fold(m, acc)
>>> agg.finish(acc), agg.describe()
(2.1666666666666665, 'mean(ms)')
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .kv import KV

__all__ = ["Field", "Aggregate", "AGGREGATES", "field_of"]

#: the aggregates ``Aggregate`` declares
AGGREGATES = ("count", "sum", "min", "max", "mean")

#: a finite float is an integer multiple of 2**-1074: sums keep that integer, exactly
_SCALE = 1074


@dataclass(frozen=True)
class Field:
    """A named field of a message, as a function: ``Field("ts")(m)`` is ``m["ts"]`` for a dict
    (or any mapping), the attribute ``ts`` of a ``msgspec.Struct`` (or another object), and the
    field of its value for a ``KV`` (what ``partition_by`` delivers).

    Windows and ``partition_by`` take a field name where they take a key or event-time
    function; the Spark runner reads such fields as columns.

    Raises:
        ValueError: ``name`` is not a non-empty string; or, called, the message has no such field.

    Example:
        >>> Field("country")({"country": "fr", "ts": 1.5})
        'fr'
        >>> Field("country")(KV("fr", {"country": "fr"}))
        'fr'
        >>> Field("ts")({"country": "fr"})
        Traceback (most recent call last):
        ...
        ValueError: the message has no field 'ts' (its fields: country)
    """

    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a field name must be a non-empty string, got {self.name!r}")

    def __call__(self, message: Any) -> Any:
        m = message.value if type(message) is KV else message
        if type(m) is dict or isinstance(m, Mapping):
            try:
                return m[self.name]
            except KeyError:
                raise ValueError(f"the message has no field {self.name!r} (its fields: "
                                 f"{', '.join(map(str, m)) or 'none'})") from None
        try:
            return getattr(m, self.name)
        except AttributeError:
            fields = getattr(type(m), "__struct_fields__", None)
            what = f"its fields: {', '.join(fields)}" if fields is not None else \
                f"a {type(m).__name__}"
            raise ValueError(f"the message has no field {self.name!r} ({what})") from None

    def __repr__(self) -> str:
        return f"Field({self.name!r})"


def field_of(value: Any, what: str) -> Any:
    """``value`` as a key or event-time function: a string names a ``Field``; anything else
    (a function, None) is returned as it is."""
    if isinstance(value, str):
        try:
            return Field(value)
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
    return value


def _number(agg: Aggregate, value: Any, finite: bool) -> Any:
    t = type(value)
    if t is int or t is float or (isinstance(value, int | float) and not isinstance(value, bool)):
        if t is float and (value != value or (finite and not math.isfinite(value))):
            raise ValueError(f"Aggregate.{agg.describe()}: field {agg.field!r} is {value!r}; "
                             f"{agg.kind} takes {'finite ' if finite else ''}numbers only")
        return value
    raise ValueError(f"Aggregate.{agg.describe()}: field {agg.field!r} must be a number (int or "
                     f"float), got {'None' if value is None else type(value).__name__ + ' '}"
                     f"{'' if value is None else repr(value)[:80]}; fix the message or filter "
                     f"it out before the window")


@dataclass(frozen=True)
class Aggregate:
    """A declared aggregation of a window's panes; make one with ``Aggregate.count()``,
    ``.sum(field)``, ``.min(field)``, ``.max(field)`` or ``.mean(field)`` and give it to a
    window as ``aggregate=``.

    ``init``, ``fold``, ``combine`` and ``finish`` are what the window runs: the accumulator
    starts as ``init()``, each message makes it ``fold(m, acc)``, hopping windows merge two with
    ``combine(a, b)``, and a pane's value is ``finish(acc)``.

    Attributes:
        kind: One of ``AGGREGATES``.
        field: The field it reads (None for ``count``).

    Raises:
        ValueError: ``kind`` is unknown, or ``field`` is missing (or given to ``count``).

    Example:
        >>> Aggregate.sum("bytes").describe(), Aggregate.count().describe()
        ('sum(bytes)', 'count()')
        >>> Aggregate("median", "ms")
        Traceback (most recent call last):
        ...
        ValueError: unknown aggregate 'median'; one of count, sum, min, max, mean
    """

    kind: str
    field: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in AGGREGATES:
            raise ValueError(f"unknown aggregate {self.kind!r}; one of {', '.join(AGGREGATES)}")
        if self.kind == "count":
            if self.field is not None:
                raise ValueError("Aggregate.count() counts messages and takes no field")
        elif not isinstance(self.field, str) or not self.field:
            raise ValueError(f"Aggregate.{self.kind}(field) needs a field name, got "
                             f"{self.field!r}")
        object.__setattr__(self, "_get", Field(self.field) if self.field else None)

    # -- factories ---------------------------------------------------------------------------------

    @staticmethod
    def count() -> Aggregate:
        """The number of a pane's messages (an ``int``).

        Returns:
            The aggregate.

        Example:
            >>> Aggregate.count().finish(3)
            3
        """
        return Aggregate("count")

    @staticmethod
    def sum(field: str) -> Aggregate:
        """The exact sum of ``field`` over a pane: an ``int`` when every value is an int, else
        the float nearest the exact sum, whatever the order of the messages.

        Args:
            field: The field's name.

        Returns:
            The aggregate.

        Example:
            >>> agg = Aggregate.sum("x")
            >>> agg.finish(agg.fold({"x": 0.1}, agg.fold({"x": 0.2}, agg.init())))
            0.30000000000000004
        """
        return Aggregate("sum", field)

    @staticmethod
    def min(field: str) -> Aggregate:
        """The smallest value of ``field`` over a pane (the first of equal ones).

        Args:
            field: The field's name.

        Returns:
            The aggregate.

        Example:
            >>> agg = Aggregate.min("ms")
            >>> agg.finish(agg.fold({"ms": 7}, agg.fold({"ms": 3}, agg.init())))
            3
        """
        return Aggregate("min", field)

    @staticmethod
    def max(field: str) -> Aggregate:
        """The largest value of ``field`` over a pane (the first of equal ones).

        Args:
            field: The field's name.

        Returns:
            The aggregate.

        Example:
            >>> agg = Aggregate.max("ms")
            >>> agg.finish(agg.fold({"ms": 7}, agg.fold({"ms": 9}, agg.init())))
            9
        """
        return Aggregate("max", field)

    @staticmethod
    def mean(field: str) -> Aggregate:
        """The mean of ``field`` over a pane: the float nearest the exact sum over the count.

        Args:
            field: The field's name.

        Returns:
            The aggregate.

        Example:
            >>> agg, acc = Aggregate.mean("ms"), Aggregate.mean("ms").init()
            >>> for ms in (10, 20, 40):
            ...     acc = agg.fold({"ms": ms}, acc)
            >>> agg.finish(acc)
            23.333333333333332
        """
        return Aggregate("mean", field)

    # -- what the window runs ---------------------------------------------------------------------

    def describe(self) -> str:
        """The aggregate as text, as plans show it.

        Example:
            >>> Aggregate.sum("bytes").describe(), Aggregate.count().describe()
            ('sum(bytes)', 'count()')
        """
        return f"{self.kind}({self.field or ''})"

    def init(self) -> Any:
        """A pane's first accumulator: 0 for ``count``; ``(count, int sum, float sum scaled by
        2**1074, whether a float came)`` for ``sum`` and ``mean``; ``()`` (no value yet) for
        ``min``/``max``, whose accumulator is ``(value,)`` after the first message.

        Example:
            >>> Aggregate.count().init(), Aggregate.mean("ms").init(), Aggregate.min("ms").init()
            (0, (0, 0, 0, False), ())
        """
        if self.kind == "count":
            return 0
        if self.kind in ("sum", "mean"):
            return (0, 0, 0, False)
        return ()

    def fold(self, message: Any, acc: Any) -> Any:
        """The accumulator after ``message``.

        Example:
            >>> Aggregate.sum("n").fold({"n": 5}, Aggregate.sum("n").init())  # (count, int sum, ...)
            (1, 5, 0, False)
            >>> Aggregate.min("n").fold({"n": None}, ())
            Traceback (most recent call last):
            ValueError: Aggregate.min(n): ...
        """
        kind = self.kind
        if kind == "count":
            return acc + 1
        try:
            value = self._get(message)  # type: ignore[attr-defined]
        except ValueError as exc:
            raise ValueError(f"Aggregate.{self.describe()}: {exc}") from None
        if kind in ("sum", "mean"):
            v = _number(self, value, True)
            n, ints, floats, any_float = acc
            if type(v) is int or not isinstance(v, float):
                return (n + 1, ints + int(v), floats, any_float)
            num, den = v.as_integer_ratio()
            return (n + 1, ints, floats + (num << (_SCALE + 1 - den.bit_length())), True)
        v = _number(self, value, False)
        if not acc:
            return (v,)
        if (v < acc[0]) if kind == "min" else (v > acc[0]):
            return (v,)
        return acc

    def combine(self, a: Any, b: Any) -> Any:
        """Two accumulators merged (``a`` of the earlier messages): what ``fold`` would give
        over ``a``'s messages and then ``b``'s.

        Example:
            >>> agg = Aggregate.min("ms")
            >>> agg.combine(agg.fold({"ms": 3}, ()), agg.fold({"ms": 1}, ())), agg.combine((), (4,))
            ((1,), (4,))
        """
        kind = self.kind
        if kind == "count":
            return a + b
        if kind in ("sum", "mean"):
            return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] or b[3])
        if not a or not b:
            return a or b
        take_b = (b[0] < a[0]) if kind == "min" else (b[0] > a[0])
        return b if take_b else a

    def finish(self, acc: Any) -> Any:
        """A pane's value from its accumulator (see the module's docstring).

        Example:
            >>> Aggregate.sum("x").finish((2, 3, 0, False)), Aggregate.max("x").finish((9,))
            (3, 9)
            >>> Aggregate.max("x").finish(())
            Traceback (most recent call last):
            ValueError: Aggregate.max(x): no value to aggregate
        """
        kind = self.kind
        if kind == "count":
            return acc
        if kind in ("sum", "mean"):
            n, ints, floats, any_float = acc
            if kind == "sum" and not any_float:
                return ints
            if n == 0:
                raise ValueError(f"Aggregate.{self.describe()}: no value to aggregate")
            exact = Fraction((ints << _SCALE) + floats, 1 << _SCALE)
            try:
                return float(exact if kind == "sum" else exact / n)
            except OverflowError:
                raise ValueError(f"Aggregate.{self.describe()}: the {kind} of field "
                                 f"{self.field!r} is beyond the range of a float") from None
        if not acc:
            raise ValueError(f"Aggregate.{self.describe()}: no value to aggregate")
        return acc[0]

    @staticmethod
    def accumulator(kind: str, count: int, int_sum: int | None = None,
                    extreme: Any = None) -> Any:
        """The accumulator of a pane of ``count`` messages from its parts (as a Spark SQL
        aggregation gives them): the integer sum for ``sum``/``mean``, the value for
        ``min``/``max``.

        Example:
            >>> acc = Aggregate.accumulator("mean", 3, int_sum=70)  # 3 values summing to 70
            >>> acc, Aggregate.mean("ms").finish(acc)
            ((3, 70, 0, False), 23.333333333333332)
        """
        if kind == "count":
            return count
        if kind in ("sum", "mean"):
            return (count, int(int_sum or 0), 0, False)
        return (extreme,)

