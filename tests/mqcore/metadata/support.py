"""Helpers for the config store tests: the hand-written Java-shaped fixture files."""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NOW_MS = 1_700_000_000_000


def fixture_text(name: str) -> str:
    """A fixture file's exact text (TABs, bare keys, no trailing newline)."""
    return (FIXTURES / name).read_bytes().decode("utf-8")


def install_fixture(config_dir: Path, fixture: str, as_name: str) -> Path:
    """Copy a fixture into ``config_dir`` under the name a manager reads."""
    config_dir.mkdir(parents=True, exist_ok=True)
    target = config_dir / as_name
    shutil.copyfile(FIXTURES / fixture, target)
    return target
