"""Shared fixtures: a controllable clock and operator contexts over in-memory stores."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from operators.base import OperatorContext
from operators.state import InMemoryState

sys.path.insert(0, str(Path(__file__).parent))  # the test modules import operator_helpers too
from operator_helpers import FakeClock  # noqa: E402


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_ctx(clock: FakeClock) -> Callable[..., OperatorContext]:
    """``make_ctx("store-a", "store-b", metrics=...)``: a context with fresh in-memory stores
    (or the given ones, as ``stores={...}``)."""

    def make(*names: str, stores: dict[str, Any] | None = None,
             metrics: Any = None) -> OperatorContext:
        all_stores = {name: InMemoryState() for name in names}
        all_stores.update(stores or {})
        return OperatorContext("task-0", {"job.name": "test"}, clock, all_stores, metrics)

    return make
