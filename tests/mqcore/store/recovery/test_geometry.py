"""Segment sizes read back from a store's files, for tools pointed at a store they did not
configure (``python -m mqcore check``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mqcore.errors import ValidationError
from mqcore.store import StoreConfig
from mqcore.store.index.index_file import index_file_size
from mqcore.store.recovery.geometry import infer_geometry
from mqcore.store.recovery.verify import check_store
from tests.mqcore.store.recovery.test_verify import make_store


def test_geometry_is_read_from_the_files(tmp_path: Path) -> None:
    make_store(tmp_path)
    g = infer_geometry(tmp_path)
    assert (g.commitlog_file_size, g.consume_queue_file_size) == (65536, 2000)
    assert (g.index_hash_slots, g.index_max_entries) == (7, 120)
    assert "from the full file" in g.notes[2]


def test_index_geometry_from_a_single_partial_file(tmp_path: Path) -> None:
    config = StoreConfig(commitlog_file_size=65536, index_hash_slots=13, index_max_entries=1000)
    make_store(tmp_path, count=40, config=config)
    assert len(os.listdir(tmp_path / "index")) == 1
    g = infer_geometry(tmp_path)
    assert (g.index_hash_slots, g.index_max_entries) == (13, 1000)
    assert "from the entries of" in g.notes[2]
    assert check_store(tmp_path, g).ok


def test_index_geometry_defaults_and_given_values(tmp_path: Path) -> None:
    (tmp_path / "index").mkdir()
    with open(tmp_path / "index" / "20240101000000000", "wb") as f:
        f.truncate(index_file_size(5_000_000, 20_000_000))  # sparse, RocketMQ's default size
    g = infer_geometry(tmp_path)
    assert (g.index_hash_slots, g.index_max_entries) == (5_000_000, 20_000_000)
    assert g.commitlog_file_size == 1 << 30 and g.consume_queue_file_size == 6_000_000
    g = infer_geometry(tmp_path, index_hash_slots=1_000_000)
    assert g.index_max_entries == (index_file_size(5_000_000, 20_000_000) - 40 - 4_000_000) // 20
    with pytest.raises(ValidationError):
        infer_geometry(tmp_path, index_max_entries=21_000_000)
