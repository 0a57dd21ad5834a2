"""The line a fenced member writes says what the group's coordinator answered and what that
means (``runtime.kafka.fence.Lease``), not a session timeout that did not pass."""

from __future__ import annotations

import asyncio
import time

import pytest

from runtime.kafka.fence import _FENCED_INSTANCE, _HEARTBEAT, _SYNC, _UNKNOWN_MEMBER, Fenced, Lease


def _fenced(code: int) -> str:
    lease = Lease(10.0, 30.0)
    lease.answered(_SYNC, 0, time.monotonic())
    assert lease.valid()
    lease.answered(_HEARTBEAT, code, time.monotonic())
    with pytest.raises(Fenced) as err:
        asyncio.run(lease.wait())
    return str(err.value)


def test_unknown_member_says_a_session_timeout_or_a_member_in_its_place() -> None:
    text = _fenced(_UNKNOWN_MEMBER)
    assert "answered UNKNOWN_MEMBER_ID 0.0 s after its last answer without error" in text, text
    assert "a session timeout (10 s), or another member took its place" in text, text


def test_fenced_instance_says_another_member_has_its_instance_id() -> None:
    text = _fenced(_FENCED_INSTANCE)
    assert "FENCED_INSTANCE_ID" in text and "joined with this one's group.instance.id" in text, text
