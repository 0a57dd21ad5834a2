"""A scrape reads the registry from its own thread while the container's loop changes it."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.host.metrics import Metrics


def test_a_collector_whose_dict_changed_under_a_scrape_is_read_again() -> None:
    metrics = Metrics()
    calls = {"n": 0}

    def collect() -> Any:
        calls["n"] += 1
        if calls["n"] == 1:  # the loop changed a dict while the scrape read it
            raise RuntimeError("dictionary changed size during iteration")
        yield ("container", "tasks", {}, 2)

    metrics.collectors.append(collect)
    assert ("container", "tasks", {}, 2) in metrics.samples()
    assert calls["n"] == 2


def test_a_collector_that_keeps_failing_is_not_hidden() -> None:
    metrics = Metrics()

    def collect() -> Any:
        raise RuntimeError("broken")
        yield  # a generator, as collectors are

    metrics.collectors.append(collect)
    with pytest.raises(RuntimeError, match="broken"):
        metrics.samples()
