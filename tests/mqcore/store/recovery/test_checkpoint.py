"""Checkpoint: RocketMQ's 4096-byte layout, atomic replacement, derived timestamps."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from mqcore.store.recovery.checkpoint import (
    CHECKPOINT_FIELDS,
    CHECKPOINT_FILE_SIZE,
    CHECKPOINT_LAYOUT,
    Checkpoint,
)

VALUES = {
    "physic_msg_timestamp": 1_700_000_000_111,
    "logics_msg_timestamp": 1_700_000_000_222,
    "index_msg_timestamp": 1_700_000_000_050,
    "master_flushed_offset": 4096,
    "confirm_phy_offset": -2,
}


def test_missing_file_is_all_zero(tmp_path: Path) -> None:
    cp = Checkpoint.load(tmp_path / "checkpoint")
    assert [getattr(cp, name) for name in CHECKPOINT_FIELDS] == [0] * 5
    assert cp.min_timestamp() == 0 and cp.min_timestamp_index() == 0
    assert not (tmp_path / "checkpoint").exists()


def test_round_trip_and_byte_layout(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    cp = Checkpoint(path, **VALUES)
    cp.flush()
    data = path.read_bytes()
    assert len(data) == CHECKPOINT_FILE_SIZE == 4096
    assert CHECKPOINT_LAYOUT.size == 40
    for offset, name in zip((0, 8, 16, 24, 32), CHECKPOINT_FIELDS, strict=True):
        assert struct.unpack_from(">q", data, offset)[0] == VALUES[name]
    assert data[40:] == bytes(4096 - 40)
    loaded = Checkpoint.load(path)
    assert loaded == cp
    assert not (tmp_path / "checkpoint.tmp").exists()


def test_flush_replaces_and_ignores_leftover_tmp(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    (tmp_path / "checkpoint.tmp").write_bytes(b"garbage from a crash")
    cp = Checkpoint.load(path)
    cp.confirm_phy_offset = 1
    cp.flush()
    cp.confirm_phy_offset = 2
    cp.flush()
    assert Checkpoint.load(path).confirm_phy_offset == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_reads_rocketmq_written_file(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    image = bytearray(4096)
    struct.pack_into(">qqqqq", image, 0, 10, 20, 30, 40, 50)
    path.write_bytes(bytes(image))
    cp = Checkpoint.load(path)
    assert (cp.physic_msg_timestamp, cp.confirm_phy_offset) == (10, 50)
    assert cp.to_bytes() == bytes(image)


def test_short_file_zero_extended(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    path.write_bytes(struct.pack(">q", 77))
    cp = Checkpoint.load(path)
    assert cp.physic_msg_timestamp == 77 and cp.logics_msg_timestamp == 0


@pytest.mark.parametrize(
    ("physic", "logics", "index", "expected_min", "expected_index"),
    [
        (10_000, 20_000, 50_000, 7_000, 7_000),
        (20_000, 10_000, 5_000, 7_000, 5_000),
        (2_000, 9_000, 9_000, 0, 0),  # clamped at 0
        (0, 0, 0, 0, 0),
    ],
)
def test_min_timestamps(
    tmp_path: Path, physic: int, logics: int, index: int, expected_min: int, expected_index: int
) -> None:
    cp = Checkpoint(
        tmp_path / "checkpoint",
        physic_msg_timestamp=physic,
        logics_msg_timestamp=logics,
        index_msg_timestamp=index,
    )
    assert cp.min_timestamp() == expected_min
    assert cp.min_timestamp_index() == expected_index
