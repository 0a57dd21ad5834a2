"""Batch reprocessing on Spark: the application's own plan and operators, compiled to PySpark.

>>> from runtime.spark import SparkRunner, FileInput           # doctest: +SKIP
>>> result = SparkRunner().reprocess(app, {"page-views": "views.parquet"},
...                                  outputs={"counts": "out/counts.jsonl"})  # doctest: +SKIP

See ``runtime.spark.runner`` for how a plan maps onto Spark, ``sources`` for inputs and
``sinks`` for outputs.
"""

from runtime.spark.kafka import KafkaOutput, KafkaRange
from runtime.spark.runner import ReprocessError, ReprocessResult, SparkRunner, spark_session
from runtime.spark.sources import FileInput, SourceError

__all__ = ["SparkRunner", "ReprocessResult", "ReprocessError", "FileInput", "KafkaRange",
           "KafkaOutput", "SourceError", "spark_session"]
