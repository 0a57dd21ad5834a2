"""Who a container claim waits for (``runtime.kafka.claim``): the processes that may run the
container as of this process's claim, from the records a fetch brought, whatever it brought
past that claim. The claim against real brokers: tests/kafka/test_kafka_static_claim.py and
tests/kafka/test_kafka_group_duplicate_id.py."""

from __future__ import annotations

import json
import os
import socket

from runtime.kafka.claim import ContainerClaim


def _claim(job_dir: str = "/jobs/b") -> ContainerClaim:
    return ContainerClaim("127.0.0.1:9", "__samza_checkpoint_t", {}, job_name="t",
                          container="1", job_dir=job_dir)


def _record(state: str, job_dir: str, pid: int | None = None) -> bytes:
    return json.dumps({"state": state, "host": socket.gethostname(),
                       "pid": os.getpid() if pid is None else pid,
                       "job_dir": job_dir}).encode()


def test_a_renewal_read_in_the_same_fetch_as_the_claim_keeps_the_runner_waited_for() -> None:
    """The runner's records at 0, 1 and 22; this claim at 31; the runner's renewal at 32 came in
    the fetch that read the claim back. The runner may run the container: wait for it."""
    c = _claim()
    c._note("runner", 0, _record("claim", "/jobs/a"))
    c._note("runner", 1, _record("own", "/jobs/a"))
    c._note("runner", 22, _record("own", "/jobs/a"))
    c._mine = 31
    c._note(c.instance, 31, _record("claim", "/jobs/b"))
    c._note("runner", 32, _record("own", "/jobs/a"))
    assert list(c._maybe_running()) == ["runner"]


def test_a_runner_seen_only_after_the_claim_owning_the_id_is_waited_for() -> None:
    """Its earlier records compacted away: an ``own`` after this claim still says it runs."""
    c = _claim()
    c._mine = 31
    c._note(c.instance, 31, _record("claim", "/jobs/b"))
    c._note("runner", 33, _record("own", "/jobs/a"))
    assert list(c._maybe_running()) == ["runner"]


def test_a_later_claim_is_not_waited_for_and_a_tombstone_or_a_dead_pid_ends_one() -> None:
    c = _claim()
    c._note("stopped", 3, _record("own", "/jobs/c"))
    c._note("stopped", 9, None)
    c._note("dead", 4, _record("own", "/jobs/d", pid=2 ** 22 + 12345))
    c._note("same-dir", 5, _record("own", "/jobs/b"))
    c._mine = 10
    c._note(c.instance, 10, _record("claim", "/jobs/b"))
    c._note("later", 11, _record("claim", "/jobs/e"))
    assert c._maybe_running() == {}
    c._note("older-claim", 2, _record("claim", "/jobs/f"))
    assert list(c._maybe_running()) == ["older-claim"]
