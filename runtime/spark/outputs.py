"""What every output of a reprocessing is to the runner (``runtime.spark.runner``): files
(``runtime.spark.sinks``) or a Kafka topic (``runtime.spark.kafka``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SparkSink"]


class SparkSink:
    """Where a reprocessing writes one output: staged by ``stage``, made visible by ``commit``.
    What a sink may leave out has its default here."""

    #: it takes ``(partition, message)`` items where a ``send_to`` chooses the partitions
    placed = False
    #: "jsonl", "parquet", or "" for a sink that is not files
    format = ""

    def prepare(self, plan: Any, counts: Mapping[str, int]) -> None:
        """Before the run: make what the output needs (a topic)."""
