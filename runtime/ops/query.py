"""``samza-dsl query``: where a running job's query endpoints are (``runtime.engine.query``),
and its answers as text.

The endpoints come from the job's records: a consumer group's members (``job.coordinator=kafka``)
record theirs with their share of the tasks, which ``samza-dsl status`` reads (on Kafka, from the
checkpoint topic); other containers record theirs in ``<job.dir>/query/container-<i>.json``.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from runtime.engine.query import query_file
from runtime.host.jobdir import job_dir
from samza_dsl.config import secret_value
from samza_dsl.errors import SamzaError
from samza_dsl.jobconfig import job_config

__all__ = ["query_urls", "query_token", "answer_text"]


def query_urls(app: Any, config: Mapping[str, Any],
               status: Callable[[], Mapping[str, Any]]) -> list[str]:
    """The query endpoints of the job of ``app``, from its records (module docstring);
    ``status`` gives the job's status (``JobSystem.status``), whose consumer group, if any,
    lists its members' endpoints."""
    cfg = job_config(app, config)
    name = cfg.job.job_name
    group = status().get("group") or {}
    if group.get("members"):
        urls = [str(m["query"]) for m in group["members"] if m.get("query")]
        if not urls:
            raise SamzaError(f"job {name!r}: no member of its consumer group serves queries; "
                             f"run it with -c query.enabled=true")
        return urls
    root = job_dir(name, cfg.job)
    urls = []
    for path in sorted(glob.glob(query_file(root, 0).replace("container-0", "container-*"))):
        try:
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
            os.kill(int(record["pid"]), 0)  # a container that ended without its cleanup
        except (OSError, ValueError, KeyError, TypeError):
            continue
        urls.append(str(record["url"]))
    if not urls:
        raise SamzaError(f"job {name!r} serves no queries here: no container recorded a query "
                         f"endpoint under {os.path.join(root, 'query')}; run it with -c "
                         f"query.enabled=true (or give --url)")
    return urls


def query_token(app: Any, config: Mapping[str, Any], given: str | None) -> str | None:
    """The token to send: ``--token`` (env:VAR, file:PATH or itself), else ``query.token``."""
    if given is not None:
        return secret_value("--token", given)
    token = job_config(app, config).query.token
    return None if token is None else secret_value("query.token", token)


def answer_text(answer: Mapping[str, Any]) -> str:
    """An answer as lines of text: ``key<TAB>value`` per entry, or ``(not found)``."""
    read = answer.get("read", "latest")
    if "entries" in answer:
        lines = [f"{json.dumps(e['key'])}\t{json.dumps(e['value'], default=str)}"
                 for e in answer["entries"]]
        more = "; more past the limit" if answer.get("more") else ""
        lines.append(f"# {len(answer['entries'])} entr{'y' if len(answer['entries']) == 1 else 'ies'}"
                     f" of store {answer['store']!r}, {read} state{more}")
        return "\n".join(lines) + "\n"
    if not answer.get("found"):
        return (f"# key {json.dumps(answer.get('key'))} is not in store {answer['store']!r} "
                f"({read} state)\n")
    copy = "'s standby replica" if answer.get("standby") else ""
    return (f"{json.dumps(answer['value'], default=str)}\n# store {answer['store']!r}, {read} "
            f"state, task {answer['task']!r} of member {answer.get('member')}{copy}\n")
