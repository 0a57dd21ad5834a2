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
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

__all__ = ["LocalRunner", "TestRunner"]

#: modules that moved into the rooms above: the old names still import, with a warning
MOVED = {
    "runtime.local_system": "runtime.local.system",
    "runtime.locallog": "runtime.local.log",
    "runtime.compaction": "runtime.local.compaction",
    "runtime.retention": "runtime.local.retention",
    "runtime.kafka_admin": "runtime.kafka.admin",
    "runtime.kafka_changelog": "runtime.kafka.changelog",
    "runtime.kafka_io": "runtime.kafka.load_dump",
    "runtime.kafka_job": "runtime.kafka.job",
    "runtime.kafka_outage": "runtime.kafka.outage",
    "runtime.kafka_system": "runtime.kafka.system",
    "runtime.lmdb_store": "runtime.state.lmdb_store",
    "runtime.store_format": "runtime.state.format",
    "runtime.state_codec": "runtime.state.codec",
    "runtime.tables": "runtime.state.tables",
}


class _MovedLoader(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: Any) -> ModuleType:
        warnings.warn(f"{spec.name} is now {self.new}", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system gave it the old name's spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        new = MOVED.get(name)
        if new is None:
            return None
        return importlib.util.spec_from_loader(name, _MovedLoader(new))


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedFinder())


def __getattr__(name: str) -> Any:
    if name == "LocalRunner":
        return importlib.import_module("runtime.runner").LocalRunner
    if name == "TestRunner":
        return importlib.import_module("runtime.testing").TestRunner
    raise AttributeError(f"module 'runtime' has no attribute {name!r}")
