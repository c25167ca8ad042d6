"""CAIRN_* variables, read the same way by the broker and the workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.errors import ValidationError
from mqcore.services import status
from mqcore.services.config import (
    ServicesConfig,
    services_config_from_env,
    store_config_from_env,
    worker_store_config,
)
from mqcore.services.result import StepResult
from mqcore.store import MessageStore, StoreConfig
from tests.mqcore.services.conftest import SMALL


def test_store_variables() -> None:
    cfg = store_config_from_env(
        {
            "CAIRN_FLUSH": "SYNC",
            "CAIRN_FLUSH_INTERVAL_MS": "250",
            "CAIRN_FILE_RESERVED_HOURS": "1.5",
            "CAIRN_DELETE_WHEN": "03;04",
            "CAIRN_DISK_WARNING_RATIO": "80",
            "CAIRN_COMMITLOG_FILE_SIZE": "65536",
            "UNRELATED": "x",
        }
    )
    assert cfg.flush == "sync"
    assert cfg.flush_interval_commitlog_ms == 250
    assert cfg.file_reserved_time_hours == 1.5
    assert cfg.delete_when == "03;04"
    assert cfg.disk_space_warning_level_ratio == 80
    assert cfg.commitlog_file_size == 65536
    assert store_config_from_env({}) == StoreConfig()


def test_services_variables() -> None:
    cfg = services_config_from_env(
        {"CAIRN_SERVICES": "Celery", "CAIRN_REPUT_LEASE_S": "2.5", "CAIRN_REPUT_MAX_BYTES": "4096"}
    )
    assert (cfg.mode, cfg.reput_lease_s, cfg.reput_max_bytes) == ("celery", 2.5, 4096)
    assert services_config_from_env({}) == ServicesConfig()
    with pytest.raises(ValidationError, match="CAIRN_REPUT_POLL_MS"):
        services_config_from_env({"CAIRN_REPUT_POLL_MS": "soon"})
    with pytest.raises(ValidationError, match="CAIRN_SERVICES"):
        services_config_from_env({"CAIRN_SERVICES": "threads"})


def test_worker_takes_the_broker_geometry(tmp_path: Path) -> None:
    assert (
        worker_store_config(tmp_path, {"CAIRN_COMMITLOG_FILE_SIZE": "8192"}).commitlog_file_size
        == 8192
    )
    with MessageStore(tmp_path, SMALL, role="broker"):
        cfg = worker_store_config(
            tmp_path, {"CAIRN_COMMITLOG_FILE_SIZE": "8192", "CAIRN_DELETE_WHEN": "05"}
        )
    assert cfg.commitlog_file_size == SMALL.commitlog_file_size  # the broker's wins
    assert cfg.index_max_entries == SMALL.index_max_entries
    assert cfg.store_host == SMALL.store_host
    assert cfg.delete_when == "05"  # service knobs stay the worker's


def test_status_files(tmp_path: Path) -> None:
    ok = StepResult("flush", False, detail={"flushed_offset": 10})
    status.record(tmp_path, "flush", 1000, result=ok)
    status.record(tmp_path, "flush", 2000, error="OSError: EIO")
    status.record(tmp_path, "flush", 3000, result=StepResult("flush", False, status="skipped"))
    [(name, state)] = status.read_all(tmp_path).items()
    assert name == "flush"
    assert state["runs"] == 2 and state["errors"] == 1
    assert state["last_error"] == "OSError: EIO" and state["last_run_ms"] == 2000
    assert state["last_result"]["detail"] == {"flushed_offset": 10}
    assert status.read_all(tmp_path / "elsewhere") == {}
