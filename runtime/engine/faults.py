"""Fault injection for crash tests: ``SAMZA_DSL_CRASH_AT=<point>:<n>`` makes the process kill
itself with SIGKILL the n-th time it reaches ``<point>`` (n counts from 1).

Points: ``batch`` (after a task processed a batch, before its outputs are written),
``commit.start``, ``commit.outputs-flushed`` (producer flushed), ``commit.changelogged`` (stores
flushed and their changelogs durable), ``commit.stores-committed`` (stores' changelog positions
recorded, offsets not yet written: "between changelog and offsets") and
``commit.done``. Under exactly-once a commit goes ``commit.start``, ``commit.stores-flushed``
(the stores' changes in their local files and the task's buffers, the transaction not
written), ``commit.transaction`` (outputs, changelog entries and checkpoint written together),
``commit.stores-committed`` and ``commit.done`` (``TXN_POINTS``); on Kafka also
``commit.sent`` (the records and the checkpoint sent in the open transaction, which is not
ended yet: ``KAFKA_TXN_POINTS``). And
``compaction.transaction`` (after a write transaction of a changelog compaction pass,
``runtime.local.compaction``). A job with outputs written by sinks (``runtime.engine.sinks``) also
reaches ``commit.sinks-prepared`` (every sink prepared, the checkpoint not written),
``commit.checkpointed`` (the checkpoint holding the sinks' positions written, the sinks not
committed) and ``commit.sinks-committed`` (``SINK_POINTS``). Without the variable, ``reached`` costs one global lookup.
"""

from __future__ import annotations

import os
import signal

__all__ = ["ARMED", "reached", "POINTS", "TXN_POINTS", "KAFKA_TXN_POINTS", "SINK_POINTS",
           "OTHER_POINTS"]

POINTS = ("batch", "commit.start", "commit.outputs-flushed", "commit.changelogged",
          "commit.stores-committed", "commit.done")
#: the points of a job under exactly-once (``runtime.engine.commit``)
TXN_POINTS = ("batch", "commit.start", "commit.stores-flushed", "commit.transaction",
              "commit.stores-committed", "commit.done")
#: the points of a job on Kafka under exactly-once (``runtime.kafka.exactly_once``)
KAFKA_TXN_POINTS = ("batch", "commit.start", "commit.stores-flushed", "commit.sent",
                    "commit.transaction", "commit.stores-committed", "commit.done")
#: the points a commit of a task with sinks reaches besides those above (``runtime.engine.sinks``)
SINK_POINTS = ("commit.sinks-prepared", "commit.checkpointed", "commit.sinks-committed")
#: points outside a job's message path
OTHER_POINTS = ("compaction.transaction",)


def _parse(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    point, _, n = spec.rpartition(":")
    known = dict.fromkeys(POINTS + KAFKA_TXN_POINTS + SINK_POINTS + OTHER_POINTS)
    if point not in known or not n.isdigit() or int(n) < 1:
        raise ValueError(f"SAMZA_DSL_CRASH_AT={spec!r}: expected <point>:<n> with a point in "
                         f"{', '.join(known)} and n >= 1")
    return point, int(n)


_target = _parse(os.environ.get("SAMZA_DSL_CRASH_AT"))
ARMED = _target is not None
_hits = 0


def reached(point: str) -> None:
    """Kill this process if it is the armed point's n-th hit."""
    global _hits
    if _target is None or point != _target[0]:
        return
    _hits += 1
    if _hits >= _target[1]:
        os.kill(os.getpid(), signal.SIGKILL)
