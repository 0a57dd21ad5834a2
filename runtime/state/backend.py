"""The stores of a job's tasks: LMDB files under ``<job.dir>/stores``, each with a write-back cache
and a changelog (docs/semantics.md rules 16-17). The local system and Kafka both use it, each
with its own changelogs; the local system adds compaction and trimming (``runtime.local``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import lmdb

from runtime.engine.codec import Record, serde_error_policy
from runtime.engine.job import SSP, JobModel, TaskModel
from runtime.engine.systems import StateBackend
from runtime.host.jobdir import store_dir
from runtime.host.metrics import Metrics, Sample
from runtime.host.storage import storage_error
from runtime.state.changelog import Changelog
from runtime.state.codec import changelog_check, store_codecs, store_key_check
from runtime.state.lmdb_store import LmdbStore
from runtime.state.ttl import attach as attach_ttl
from runtime.state.ttl import expire_on_restore, table_ttl
from runtime.state.views import CommittedViews
from runtime.state.writeback import store_sizes
from samza_dsl.errors import SerdeError
from samza_dsl.jobconfig import JobConfig

__all__ = ["StoreBackend"]


@contextlib.contextmanager
def _named_faults(store: LmdbStore, doing: str) -> Iterator[None]:
    """A storage fault (a full or read-only disk...) while ``doing`` says so, naming the file."""
    try:
        yield
    except lmdb.Error as e:
        fault = storage_error(e, store.path, doing)
        if fault is None:
            raise
        raise fault from e


class StoreBackend(StateBackend):
    """LMDB stores under ``<root>/stores``, with the changelogs ``changelogs`` makes (store name
    -> the changelog of a partition, a task's index). Window and join state use
    ``runtime.state.codec``; a changelog entry that does not decode meets its policy,
    ``dead_letter`` taking the raw entry."""

    def __init__(self, root: str, job: JobModel, config: JobConfig,
                 changelogs: Mapping[str, Callable[[int], Changelog]],
                 metrics: Metrics,
                 dead_letter: Callable[[SSP, int, Record, SerdeError], None] | None = None
                 ) -> None:
        self.root = root
        self.dead_letter = dead_letter
        self.job = job
        self.config = config
        self.changelogs = dict(changelogs)
        self.metrics = metrics
        self.stores: dict[str, dict[str, LmdbStore]] = {}
        #: what the stores did, kept when they close (``samples`` after the run)
        self._final: list[Sample] = []
        self._changelog_of: dict[tuple[str, str], Changelog] = {}
        #: (task, store) -> what opening the store did: mode, reason, entries replayed, seconds
        self.restores: dict[tuple[str, str], dict[str, Any]] = {}
        #: the committed state interactive queries read, held from each commit (set while a
        #: query endpoint runs: ``runtime.engine.query``)
        self.views: CommittedViews | None = None

    def changelog_opened(self, task: TaskModel, store_name: str, changelog: Changelog) -> None:
        """A store's changelog is open (a hook: the local system compacts its own)."""

    def open_replica(self, task: TaskModel, store_name: str) -> LmdbStore:
        """A standby's replica of a task's store (``LmdbStore.open_replica``), in the directory
        the task's own store uses, so that the task restores only the changelog's tail there.
        Its changelog entries are decoded as a restore decodes them; one that does not decode
        is skipped here (the task's restore applies the stream's policy to it)."""
        spec = self.job.plan.stores[store_name]
        ke, kd, ve, vd = store_codecs(self.job.plan, store_name)
        stream = str(spec.changelog_stream)
        check = changelog_check(store_name, stream, task.index, kd, vd,
                                policy=serde_error_policy(self.config, stream),
                                dead_letter=None, metrics=None)
        ttl = table_ttl(self.job.plan, store_name)
        if ttl is not None:
            check = expire_on_restore(check, ttl)
        return LmdbStore.open_replica(
            store_dir(self.root, store_name, task.name), name=store_name, task=task.name,
            key_encode=ke, key_decode=kd, value_encode=ve, value_decode=vd, check=check)

    def open(self, task: TaskModel, store_name: str, checkpointed: int | None) -> LmdbStore:
        spec = self.job.plan.stores[store_name]
        ke, kd, ve, vd = store_codecs(self.job.plan, store_name)
        changelog = None
        check = None
        cfg = self.config
        cache_size, write_batch_size = store_sizes(cfg, store_name)
        if store_name in self.changelogs:
            changelog = self.changelogs[store_name](task.index)
            self._changelog_of[(task.name, store_name)] = changelog
            stream = str(spec.changelog_stream)
            check = changelog_check(store_name, stream, task.index, kd, vd,
                                    policy=serde_error_policy(cfg, stream),
                                    dead_letter=self.dead_letter, metrics=self.metrics)
            self.changelog_opened(task, store_name, changelog)
        ttl = table_ttl(self.job.plan, store_name)
        restored = None
        if ttl is not None and check is not None:
            check = restored = expire_on_restore(check, ttl)
        store = LmdbStore.open(
            store_dir(self.root, store_name, task.name),
            name=store_name, task=task.name, key_encode=ke, key_decode=kd, value_encode=ve,
            value_decode=vd, changelog=changelog, checkpointed=checkpointed,
            cache_size=cache_size, write_batch_size=write_batch_size, check=check)
        # send_to and join_table check a table's keys as they come
        store.check_key = store_key_check(self.job.plan, store_name)
        if ttl is not None:
            attach_ttl(store, ttl, restored=restored)
        info = store.restore_info
        self.metrics.inc("store-restore-entries", int(info.get("entries_replayed", 0)))
        self.restores[(task.name, store_name)] = dict(info)
        self.stores.setdefault(task.name, {})[store_name] = store
        return store

    def samples(self) -> list[Sample]:
        """Per store of each task: reads from LMDB (``gets``), values and deletes written
        (``puts``, ``deletes``), its bytes, and what opening it replayed and took."""
        if not self.stores:
            return list(self._final)
        out: list[Sample] = []
        for task_name, stores in list(self.stores.items()):
            for name, store in list(stores.items()):
                labels = {"task": task_name, "store": name}
                info = self.restores.get((task_name, name), {})
                try:
                    size = store.size_bytes()
                except Exception:  # a store closing meanwhile
                    size = 0
                out += [("store", "gets", labels, store.reads),
                        ("store", "puts", labels, store.writes),
                        ("store", "deletes", labels, store.deletes),
                        ("store", "bytes", labels, size),
                        ("store", "restore-entries", labels, int(info.get("entries_replayed", 0))),
                        ("store", "restore-ns", labels, int(float(info.get("seconds", 0.0)) * 1e9))]
        return out

    def flush(self, task_name: str) -> None:
        for store in self.stores.get(task_name, {}).values():
            with _named_faults(store, f"flushing store {store.name!r} of task {task_name!r}"):
                store.flush()

    def committed(self, task_name: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, store in self.stores.get(task_name, {}).items():
            changelog = self._changelog_of.get((task_name, name))
            offset = changelog.end_offset() if changelog is not None else None
            with _named_faults(store, f"committing store {name!r} of task {task_name!r}"):
                store.mark_committed(offset)
            if offset is not None:
                out[name] = offset
        if self.views is not None:
            self.views.take(task_name, self.stores.get(task_name, {}))
        return out

    def changelog_positions(self, task_name: str) -> dict[str, int]:
        """Where each changelog of the task's stores ends now: what a checkpoint written in the
        same transaction as their entries holds (``runtime.kafka.exactly_once``)."""
        return {name: changelog.end_offset()
                for (task, name), changelog in self._changelog_of.items() if task == task_name}

    def checkpointed(self, task_name: str) -> None:
        """The task's checkpoint is written (a hook: the local system compacts and trims)."""

    def close_task(self, task_name: str) -> None:
        """Close the stores of a task this container no longer runs (it moved to another)."""
        if self.views is not None:
            self.views.drop(task_name)
        for name, store in self.stores.pop(task_name, {}).items():
            self._changelog_of.pop((task_name, name), None)
            store.close()

    def close(self) -> None:
        self._final = self.samples()  # what the stores did, for a report after the run
        if self.views is not None:
            self.views.close()
        for stores in self.stores.values():
            for store in stores.values():
                store.close()
        self.stores.clear()
