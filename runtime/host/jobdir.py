"""Where a job keeps its files on this machine (``job.dir``) and the names it gives them: the
local system keeps its log there, every system its stores and locks."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from typing import Any

from planner.owners import dead_letter_stream, metrics_stream

__all__ = ["job_dir", "dead_letter_stream", "metrics_stream", "reset_command", "store_dir",
           "task_dir"]


def job_dir(job_name: str, config: Mapping[str, Any]) -> str:
    """``job.dir``, by default ``.samza/<job>`` in the working directory."""
    return str(config.get("job.dir") or os.path.join(".samza", job_name))


def task_dir(task_name: str) -> str:
    """A task's directory name (under a store's)."""
    return task_name.replace(" ", "-")


def store_dir(root: str, store_name: str, task_name: str) -> str:
    """Where a task's store keeps its local copy, under ``job.dir`` ``root``."""
    return os.path.join(root, "stores", store_name, task_dir(task_name))


def reset_command(config: Mapping[str, Any]) -> str:
    """The command that starts a job of ``config`` over (``samza-dsl reset``), with its
    ``job.dir`` where the config sets one.

    >>> reset_command({"job.dir": "/var/lib/my jobs"})
    "samza-dsl reset APP -c job.dir='/var/lib/my jobs'"
    """
    where = config.get("job.dir")
    return "samza-dsl reset APP" + (f" -c job.dir={shlex.quote(str(where))}" if where else "")
