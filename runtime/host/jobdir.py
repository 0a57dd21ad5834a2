"""Where a job keeps its files on this machine (``job.dir``) and the names it gives them: the
local system keeps its log there, every system its stores and locks."""

from __future__ import annotations

import os
import shlex

from planner.owners import dead_letter_stream, metrics_stream
from samza_dsl.jobconfig import JobSettings

__all__ = ["job_dir", "dead_letter_stream", "metrics_stream", "reset_command", "store_dir",
           "task_dir"]


def job_dir(job_name: str, job: JobSettings) -> str:
    """``job.dir``, by default ``.samza/<job>`` in the working directory."""
    return str(job.dir or os.path.join(".samza", job_name))


def task_dir(task_name: str) -> str:
    """A task's directory name (under a store's)."""
    return task_name.replace(" ", "-")


def store_dir(root: str, store_name: str, task_name: str) -> str:
    """Where a task's store keeps its local copy, under ``job.dir`` ``root``."""
    return os.path.join(root, "stores", store_name, task_dir(task_name))


def reset_command(job: JobSettings) -> str:
    """The command that starts a job of ``job`` over (``samza-dsl reset``), with its
    ``job.dir`` where the config sets one.

    >>> from samza_dsl.jobconfig import JobConfig
    >>> reset_command(JobConfig.validated({"job.dir": "/var/lib/my jobs"}).job)
    "samza-dsl reset APP -c job.dir='/var/lib/my jobs'"
    """
    where = job.dir
    return "samza-dsl reset APP" + (f" -c job.dir={shlex.quote(str(where))}" if where else "")
