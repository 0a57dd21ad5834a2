"""The error hierarchy and byte truncation for messages."""

from __future__ import annotations

import pytest

from samza_dsl import CallbackTimeout, ConfigError, PlanError, SamzaError, SerdeError, TaskError
from samza_dsl.errors import truncate_bytes


@pytest.mark.parametrize("cls", [PlanError, ConfigError, SerdeError, TaskError, CallbackTimeout])
def test_every_error_is_a_samza_error(cls):
    assert issubclass(cls, SamzaError)


def test_callback_timeout_is_a_task_error():
    assert issubclass(CallbackTimeout, TaskError)
    err = CallbackTimeout("too slow", op_id="a-1-map-0", task="Partition 0", stream="in",
                          partition=0, offset=12)
    assert (err.op_id, err.task, err.stream, err.partition, err.offset) == (
        "a-1-map-0", "Partition 0", "in", 0, 12)
    assert str(err) == "too slow"


def test_truncate_bytes():
    assert truncate_bytes(b"abc") == "b'abc'"
    assert truncate_bytes(bytearray(b"abc")) == "b'abc'"
    assert truncate_bytes(b"x" * 64) == repr(b"x" * 64)
    assert truncate_bytes(b"x" * 65) == f"{b'x' * 64!r}... (65 bytes)"
    assert truncate_bytes(memoryview(b"0123456789"), limit=4) == "b'0123'... (10 bytes)"


def test_serde_error_text():
    err = SerdeError("bad", data=b"\x00" * 100, stream="s", partition=1, offset=7)
    zeros = repr(bytes(64))
    assert str(err) == f"bad (at stream 's', partition 1, offset 7); bytes: {zeros}... (100 bytes)"
    assert str(SerdeError("plain")) == "plain"
