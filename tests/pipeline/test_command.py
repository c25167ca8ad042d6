"""``manage.py pipeline``: bad input is one clear line and a non-zero exit; a run prints progress."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command


def test_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="not a store directory"):
        call_command("pipeline", "archive", "--store", str(tmp_path), "--out", str(tmp_path / "o"))


def test_unknown_job() -> None:
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("pipeline", "vacuum")


@pytest.mark.spark
@pytest.mark.slow
def test_archive_command_prints_progress(spark: Any, mq_store: Path, tmp_path: Path) -> None:
    out = StringIO()
    call_command(
        "pipeline", "archive", "--store", str(mq_store), "--out", str(tmp_path), stdout=out
    )
    text = out.getvalue()
    assert "archive: segment 00000000000000000000@0" in text and "archive: done: " in text
    assert "messages=" in text
    assert spark.range(3).count() == 3  # the shared session is still alive
