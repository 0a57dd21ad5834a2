"""The embedded local system: a partitioned log in LMDB on local disk (``log``), the job that runs
on it (``system``: producer, consumer, checkpoints, changelogs, ``LocalJob``), and what keeps its
disk use bounded (``retention``: trimming and retention; ``compaction``: changelog compaction)."""

from typing import Any


def __getattr__(name: str) -> Any:
    # ``from runtime.local import LocalRunner`` predates this package; the runner is the engine's
    if name == "LocalRunner":
        from runtime.runner import LocalRunner

        return LocalRunner
    raise AttributeError(f"module 'runtime.local' has no attribute {name!r}")
