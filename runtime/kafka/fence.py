"""Fencing a member of a job's consumer group that lost its tasks (docs/several-machines.md).

A member frozen past the session timeout (SIGSTOP, a long pause, a host that stops answering)
is dropped by the broker's group coordinator, and its tasks move. When it comes back, nothing it
writes for those tasks may count: no output, no changelog entry, no checkpoint.

- **The lease.** The broker drops a member no sooner than a session timeout after the last
  heartbeat it answered, and ends a rebalance without a member no sooner than the rebalance
  timeout after it began, which is after the member's last heartbeat answered without error.
  So a member that sent a heartbeat at ``t`` and had it answered without error is in the group
  until ``t`` plus the session timeout at least. ``Lease`` keeps that deadline (less a margin);
  the container's producer sends nothing past it (``KafkaProducer.lease``): it waits for the
  next answered heartbeat, or learns that it was fenced.
- **Fenced.** A heartbeat (or a join or sync) answered ``ILLEGAL_GENERATION``,
  ``UNKNOWN_MEMBER_ID`` or ``FENCED_INSTANCE_ID`` tells the member that the group went on
  without it. Every write waiting on the lease fails with ``Fenced``; the producer drops what it
  had not sent, and the container drops its tasks without a commit (their local stores were
  flushed uncommitted, or not at all: they are rebuilt from the changelogs if they come back),
  says so in one line, and joins again.
- **Checkpoints carry the group generation.** Each checkpoint names the group generation and the
  member that wrote it; a new owner writes its task's checkpoint again, with its generation,
  before it reads the task's inputs. A reader of the checkpoint topic ignores a task's record of
  a generation older than one it read before it (``runtime.kafka.system.read_checkpoint_topic``),
  so a late write of a fenced member never becomes the task's checkpoint.

The lease is checked before each record batch is handed to the Kafka client: a pause that falls
between that check and the client writing the batch to its socket is the one gap left, which
only the brokers' transactions close.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from runtime.kafka.aiokafka_compat import wrap_coordinator_send
from samza_dsl.errors import SamzaError

__all__ = ["Fenced", "Lease", "watch_coordinator"]

#: the Kafka protocol's API keys and error codes the lease reads
_JOIN, _HEARTBEAT, _SYNC = 11, 12, 14
_ILLEGAL_GENERATION, _UNKNOWN_MEMBER, _REBALANCING, _FENCED_INSTANCE = 22, 25, 27, 82
_FENCING = {_ILLEGAL_GENERATION: "ILLEGAL_GENERATION", _UNKNOWN_MEMBER: "UNKNOWN_MEMBER_ID",
            _FENCED_INSTANCE: "FENCED_INSTANCE_ID"}
#: of a session timeout, the part a lease lasts (the rest covers a produce request's way)
_SHARE = 0.8


class Fenced(SamzaError):
    """The member was dropped from its group: what it had not written is dropped."""


class Lease:
    """Until when this member is surely in its group (``time.monotonic()`` seconds). Written by
    the membership's thread, read by the container's loop (floats and ints: no lock needed)."""

    def __init__(self, session_s: float, rebalance_s: float) -> None:
        self.session_s = session_s * _SHARE
        self._session_timeout_s = session_s
        self.rebalance_s = rebalance_s * _SHARE
        self._grace = session_s + rebalance_s
        #: inf until the member's first assignment (it has written nothing for a task yet)
        self.until = math.inf
        self._ok_at = 0.0
        #: how many times the member was fenced, and why the last time
        self.fences = 0
        self.reason = ""
        self.armed = False
        #: the heartbeat that last renewed the lease was answered after this long (seconds)
        self.round_trip = 0.0

    def valid(self) -> bool:
        return time.monotonic() < self.until

    def answered(self, api: int, code: int, sent: float) -> None:
        """A coordinator's answer to a request sent at ``sent``."""
        if code == 0 and api in (_HEARTBEAT, _SYNC):
            self._ok_at = sent
            self.until = sent + self.session_s
            self.round_trip = time.monotonic() - sent
            if api == _SYNC:
                self.armed = True
        elif code == _REBALANCING and api == _HEARTBEAT and self.armed:
            # the rebalance began after the last heartbeat answered without error; it ends
            # without this member no sooner than the rebalance timeout after that
            self.until = max(self.until, min(self._ok_at + self.rebalance_s,
                                             sent + self.session_s))
        elif code in _FENCING and self.armed and api in (_HEARTBEAT, _SYNC, _JOIN):
            self.until = 0.0
            self.armed = False
            since = max(0.0, time.monotonic() - self._ok_at)
            why = {_FENCED_INSTANCE: "another member joined with this one's group.instance.id",
                   _ILLEGAL_GENERATION: "the group went on to a later generation without this "
                                        "member (it did not rejoin in time)"}.get(
                code, "it had not heard from this member for a session timeout "
                      f"({self._session_timeout_s:g} s), or another member took its place")
            self.reason = (f"the group's coordinator answered {_FENCING[code]} {since:.1f} s "
                           f"after its last answer without error: {why}")
            self.fences += 1

    def _give_up(self) -> None:
        """No answer for a session and a rebalance timeout past the lease: the member is out of
        the group whatever the coordinator would say (a member that cannot reach it, or one left
        out of a rebalance it did not rejoin in time)."""
        if self.armed and time.monotonic() > self.until + self._grace:
            self.until = 0.0
            self.armed = False
            self.reason = (f"no heartbeat of this member was answered for "
                           f"{time.monotonic() - self._ok_at:.1f} s")
            self.fences += 1

    def end(self) -> None:
        """The member left its group: what waits for the lease now gives up (``Fenced``)."""
        self.until = 0.0
        self.armed = False

    async def wait(self, poll: float = 0.02) -> None:
        """Return once the lease is valid; raise ``Fenced`` once the member learns it was
        dropped from its group, or after a session and a rebalance timeout without an answer."""
        fences = self.fences
        while not self.valid():
            self._give_up()
            if self.fences != fences or not self.armed and self.until == 0.0:
                raise Fenced(f"fenced: {self.reason or 'the member left its group'}")
            await asyncio.sleep(poll)


def watch_coordinator(consumer: Any, lease: Lease) -> None:
    """Let ``lease`` see the answers of the group coordinator to ``consumer``'s heartbeats,
    joins and syncs (aiokafka sends them all through its coordinator's ``_send_req``)."""
    def wrap(send: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        async def send_req(request: Any) -> Any:
            sent = time.monotonic()
            resp = await send(request)
            api = getattr(request, "API_KEY", None)  # foreign: aiokafka's request
            if api in (_JOIN, _HEARTBEAT, _SYNC):
                lease.answered(api, int(getattr(resp, "error_code", 0)),  # foreign: aiokafka's
                               sent)
            return resp
        return send_req
    wrap_coordinator_send(consumer, wrap)
