"""Operator implementations: one module per operator kind, free of asyncio loops, Kafka and Spark."""
