"""The Spark tests share the session-wide ``spark`` fixture (tests/conftest.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the test modules import spark_apps
