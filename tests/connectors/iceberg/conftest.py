"""The Iceberg connector's tests: a folder of each test's own holds the SQLite catalog and the
warehouse (``lake``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from samza_dsl.iceberg import IcebergCatalogSystem, IcebergSystem


@pytest.fixture
def lake(tmp_path: Path) -> IcebergCatalogSystem:
    return IcebergSystem("lake", catalog_uri=f"sqlite:///{tmp_path}/catalog.db",
                         warehouse=str(tmp_path / "warehouse"))
