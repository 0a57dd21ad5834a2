"""``samza-dsl reset`` of a job on Kafka: it forgets the job's progress, as on the local system.
Its checkpoint topic, its stores' changelog topics, its intermediate streams' topics and its
dead-letter topic are deleted (the next run creates them again, empty), and so are its local
stores under ``<job.dir>/stores``; with ``outputs``, its output topics too. Inputs stay. It holds
the job's lock in ``job.dir`` meanwhile, so it refuses while a run of the job holds it there."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import Any

from runtime.host.jobdir import dead_letter_stream
from runtime.kafka.admin import delete_topics, describe_topics
from runtime.kafka.job import KafkaJob
from runtime.kafka.load_dump import reader_config
from runtime.kafka.security import check_login

__all__ = ["kafka_reset"]


async def kafka_reset(app: Any, config: Mapping[str, Any], *, outputs: bool = False,
                      timeout: float = 10.0) -> tuple[str, list[str]]:
    """Resets the job of ``app``; returns its name and what went."""
    job = KafkaJob(app, reader_config(app, config), timeout=timeout)  # runs no containers
    job.lock.exclusive("reset", f"reset job {job.job_name!r}")
    try:
        await check_login(job.servers, job.login, job.security)
        gone = [f"topic {t}" for t in await delete_topics(
            job.servers, _topics(job, await _plan(job), outputs), timeout=timeout,
            **job.login)]
        stores = os.path.abspath(os.path.join(job.root, "stores"))
        if os.path.isdir(stores):
            shutil.rmtree(stores)
            gone.append(f"stores in {stores}")
        return job.job_name, gone
    finally:
        job.lock.release()


async def _plan(job: KafkaJob) -> Any:
    """The job's plan, with the partition counts of its streams that exist (a reset needs only
    the names of its topics, which do not depend on them)."""
    spec = job.app.spec()
    declared = {**spec.inputs, **spec.outputs}
    found = await describe_topics(job.servers, {d.physical_name for d in declared.values()},
                                  timeout=job.timeout, **job.login)
    known = {sid: found[d.physical_name] for sid, d in declared.items()
             if d.partitions is None and found[d.physical_name] is not None}
    return job.app.plan(partitions=known, config=job.config)


def _topics(job: KafkaJob, plan: Any, outputs: bool) -> list[str]:
    """The topics that hold the job's progress (and its outputs, with ``outputs``)."""
    names = [job.checkpoint_topic, dead_letter_stream(job.job_name)]
    names += [store.changelog_stream
              for store in plan.stores.values() if store.changelog is not None]
    names += [s.physical_name for s in plan.streams.values()
              if s.kind in ("intermediate", "broadcast") or (outputs and s.kind == "output")]
    return list(dict.fromkeys(names))
