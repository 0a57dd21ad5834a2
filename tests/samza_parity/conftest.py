"""The Samza harness, started once for the session's parity tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.samza_parity.samza_harness import SamzaHarness


@pytest.fixture(scope="session")
def samza() -> Iterator[SamzaHarness]:
    harness = SamzaHarness()
    yield harness
    harness.close()
