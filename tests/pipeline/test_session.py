"""The session builder's environment handling (no JVM started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import session


def test_master_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("CAIRN_SPARK_MASTER", raising=False)
    assert session.resolve_master() == "local[*]"
    monkeypatch.setenv("CAIRN_SPARK_MASTER", "spark://h:7077")
    assert session.resolve_master() == "spark://h:7077"
    assert session.resolve_master("local[2]") == "local[2]"
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1234")  # under spark-submit
    assert session.resolve_master() is None


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(
        session.PipelineEnvironmentError, match="Java 17.*apt-get install openjdk-17"
    ):
        session.find_java_home()


def test_old_java_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text("#!/bin/sh\necho 'openjdk version \"1.8.0_392\"' >&2\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(session.PipelineEnvironmentError, match="is Java 8"):
        session.find_java_home()


def test_java_found_here() -> None:
    assert (Path(session.find_java_home()) / "bin" / "java").is_file()
