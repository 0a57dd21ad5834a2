"""The runtime's modules import under their rooms' names only: the names they had before the rooms
(``runtime.lmdb_store``, ``runtime.kafka_system`` ...) and ``runtime.local.LocalRunner`` are gone."""

from __future__ import annotations

import importlib

import pytest

OLD = ["runtime.local_system", "runtime.locallog", "runtime.compaction", "runtime.retention",
       "runtime.kafka_admin", "runtime.kafka_changelog", "runtime.kafka_io", "runtime.kafka_job",
       "runtime.kafka_outage", "runtime.kafka_system", "runtime.lmdb_store", "runtime.store_format",
       "runtime.state_codec", "runtime.tables"]


@pytest.mark.parametrize("old", OLD)
def test_a_module_name_from_before_the_rooms_does_not_import(old: str) -> None:
    with pytest.raises(ModuleNotFoundError, match=old):
        importlib.import_module(old)


def test_the_local_runner_comes_from_the_engine_only() -> None:
    import runtime.local
    from runtime import LocalRunner
    from runtime.runner import LocalRunner as runner

    assert LocalRunner is runner
    assert not hasattr(runtime.local, "LocalRunner")
