"""Testing helpers: ``TestRunner`` (in-memory runs), ``strategies`` (hypothesis strategies;
``keyed_inputs`` and its ``KeyedInputs`` draw a whole application's inputs at once),
``model`` (a reference model of event-time windows and joins, docs/semantics.md) and
``kv_service`` (a key-value service over HTTP on 127.0.0.1, and its client, to back a remote
table in tests and examples).

``TestRunner`` and ``TestResult`` are ``runtime.testing``'s, imported only when asked for:
``TestRunner(app, config=None).add_input(descriptor, messages).run(timeout=None)`` runs the
application in memory over bounded inputs (``messages`` is a list, placed as Kafka's producer
would: a ``KV`` in its key's partition, anything else in partition 0; or ``{partition: list}``) and returns a ``TestResult``, whose ``messages(output)`` is every
partition's output, partition by partition, and ``partitions(output)`` is
``{partition: list}`` (``output`` is the descriptor or its stream id).

Example:
    >>> from samza_dsl import KV, StreamApplication
    >>> from samza_dsl.systems import MemorySystem
    >>> from samza_dsl.testing import TestRunner
    >>> app, mem = StreamApplication("demo"), MemorySystem()
    >>> words, out = mem.input("words", partitions=2), mem.output("lengths", partitions=2)
    >>> app.input(words).map(lambda w: KV(w, len(w))).send_to(app.output(out))
    >>> result = TestRunner(app).add_input(words, {0: ["a", "bb"], 1: ["ccc"]}).run()
    >>> sorted(kv.value for kv in result.messages(out)), sorted(result.partitions(out))
    ([1, 2, 3], [0, 1])
"""

from __future__ import annotations

from typing import Any

__all__ = ["TestRunner", "TestResult", "strategies", "model", "keyed_inputs", "KeyedInputs"]


def __getattr__(name: str) -> Any:
    # samza_dsl is the API layer: the runtime is imported only when asked for
    if name in ("TestRunner", "TestResult"):
        from runtime import testing

        return getattr(testing, name)
    if name in ("keyed_inputs", "KeyedInputs"):
        # hypothesis is a test dependency: imported only when asked for
        from samza_dsl.testing import app_inputs

        return getattr(app_inputs, name)
    if name in ("strategies", "model"):
        import importlib

        return importlib.import_module(f"samza_dsl.testing.{name}")
    raise AttributeError(f"module 'samza_dsl.testing' has no attribute {name!r}")
