"""Trigger instances, on their own (the window tests drive them through panes)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operators.triggers import AnyTriggerImpl, RepeatTriggerImpl, make_trigger
from samza_dsl.windows import Trigger, Triggers

SEC = timedelta(seconds=1)


@given(st.integers(1, 20), st.integers(0, 40))
def test_count_fires_on_its_nth_message(n: int, messages: int) -> None:
    t = make_trigger(Triggers.count(n))
    fired = [t.on_message(i) for i in range(messages)]
    assert fired == [i + 1 >= n for i in range(messages)]
    assert t.deadline() is None


def test_time_since_first_message_counts_from_the_first() -> None:
    t = make_trigger(Triggers.time_since_first_message(SEC))
    assert t.deadline() is None and t.on_time(10**9) is False  # nothing before a message
    assert t.on_message(100) is False and t.on_message(700) is False
    assert t.deadline() == 1100
    assert t.on_time(1099) is False and t.on_time(1100) is True
    assert t.deadline() is None and t.on_message(1200) is True  # stays fired


def test_time_since_last_message_moves_with_each_message() -> None:
    t = make_trigger(Triggers.time_since_last_message(SEC))
    t.on_message(100)
    t.on_message(700)
    assert t.deadline() == 1700
    assert t.on_time(1100) is False and t.on_time(1700) is True


def test_time_triggers_do_not_fire_on_a_message_even_when_due() -> None:
    t = make_trigger(Triggers.time_since_first_message(SEC))
    t.on_message(0)
    assert t.on_message(5000) is False  # Samza: time triggers fire at window ticks only
    assert t.on_time(5000) is True


def test_any_fires_with_its_first_child_and_drops_the_others() -> None:
    t = make_trigger(Triggers.any(Triggers.time_since_first_message(SEC), Triggers.count(2)))
    assert isinstance(t, AnyTriggerImpl)
    assert t.on_message(0) is False and t.deadline() == 1000
    assert t.on_message(10) is True
    assert t.children == [] and t.deadline() is None
    assert t.on_time(5000) is True  # fired for good; the window retires or restarts it


def test_repeat_restarts_a_fresh_trigger() -> None:
    t = make_trigger(Triggers.repeat(Triggers.count(2)))
    assert isinstance(t, RepeatTriggerImpl) and t.repeating
    assert [t.on_message(i) for i in range(2)] == [False, True]
    t.restart()
    assert t.fired is False
    assert [t.on_message(i) for i in range(2)] == [False, True]
    timed = make_trigger(Triggers.repeat(Triggers.time_since_first_message(SEC)))
    timed.on_message(0)
    assert timed.on_time(1000) is True
    timed.restart()
    assert timed.deadline() is None  # a restarted time trigger waits for the next message


def test_only_a_top_level_repeat_repeats() -> None:
    assert not make_trigger(Triggers.any(Triggers.repeat(Triggers.count(1)))).repeating
    assert not make_trigger(Triggers.count(1)).repeating


def test_unknown_trigger_specs_raise() -> None:
    @dataclass(frozen=True)
    class Mystery(Trigger):
        pass

    with pytest.raises(TypeError, match="no trigger implementation for Mystery"):
        make_trigger(Mystery())
