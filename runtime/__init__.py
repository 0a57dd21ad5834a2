"""The runtime: everything that touches time, I/O and processes.

``from runtime import LocalRunner`` runs an application in this process. The rooms
(docs/architecture.md):

- the engine, here: ``runner`` (``LocalRunner``), ``container``, ``task``, ``wiring`` (a task's
  operator chain and senders), ``commit`` (the commit order), ``dag``, ``job``, ``elastic``,
  ``watermarks``, ``codec``, ``checkpoints``, ``metrics``, ``systems`` (the registry of systems);
- ``runtime.state``: stores, their format and codecs;
- ``runtime.local``: the embedded log and the job on it;
- ``runtime.kafka``: aiokafka's consumer and producer, admin, changelogs and the job on Kafka;
- ``runtime.spark``: reprocessing on Spark.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["LocalRunner", "TestRunner"]


def __getattr__(name: str) -> Any:
    if name == "LocalRunner":
        return importlib.import_module("runtime.runner").LocalRunner
    if name == "TestRunner":
        return importlib.import_module("runtime.testing").TestRunner
    raise AttributeError(f"module 'runtime' has no attribute {name!r}")
