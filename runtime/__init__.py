"""The runtime: everything that touches time, I/O and processes.

``from runtime import LocalRunner`` runs an application in this process. The rooms
(docs/architecture.md), each importing only the rooms below it:

- ``runtime.ops``: the ``samza-dsl`` command and the job page;
- the front, here: ``runner`` (``LocalRunner``), ``testing`` (``TestRunner``) and ``memory``
  (its in-memory system), ``run_inputs``, ``progress``, ``summary``;
- ``runtime.spark``: reprocessing on Spark;
- ``runtime.local`` and ``runtime.kafka``: the embedded log and Kafka, the systems a job runs on;
- ``runtime.state``: stores, their format and codecs;
- ``runtime.engine``: containers, tasks, wiring, batch runs, event time, codecs, the commit;
- ``runtime.host``: the job's directory and lock, metrics and reporters, health probes.
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
