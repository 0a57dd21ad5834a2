"""samza-dsl: Apache Samza's high-level stream-processing API in Python.

>>> from samza_dsl import StreamApplication, KV
>>> from samza_dsl.systems import MemorySystem
>>> app = StreamApplication("hello")
>>> mem = MemorySystem()
>>> app.input(mem.input("in")).map(lambda m: KV(m, 1)).send_to(app.output(mem.output("out")))
"""

from .aggregate import Aggregate, Field
from .application import StreamApplication
from .context import AsyncReadWriteTable, Context, ReadWriteTable
from .errors import (
    CallbackTimeout,
    ConfigError,
    PlanError,
    RemoteTableError,
    SamzaError,
    SerdeError,
    TaskError,
)
from .kv import KV
from .late import LateMessage
from .remote import CacheSpec, RemoteCallError, RetryPolicy
from .stream import MessageStream, OutputStream, RemoteTable, Table
from .windows import (
    AccumulationMode,
    FiringType,
    Trigger,
    Triggers,
    Window,
    WindowKey,
    WindowPane,
    Windows,
)

__version__ = "0.1.0"

__all__ = [
    "StreamApplication", "MessageStream", "OutputStream", "Table", "KV", "Windows", "Window",
    "Triggers", "Trigger", "AccumulationMode", "FiringType", "WindowPane", "WindowKey", "Context",
    "ReadWriteTable", "LateMessage", "SamzaError", "PlanError", "ConfigError", "SerdeError", "TaskError",
    "CallbackTimeout", "AsyncReadWriteTable", "RemoteTable", "RetryPolicy", "CacheSpec",
    "RemoteCallError", "RemoteTableError", "Aggregate", "Field",
]
