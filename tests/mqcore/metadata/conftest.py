"""Fixtures for the config store tests: a fake clock and a config directory under tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from tests.mqcore.metadata.support import NOW_MS


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    return tmp_path / "store" / "config"
