"""StoreConfig: RocketMQ's defaults, and a clear error naming the field for a bad value."""

from __future__ import annotations

import pytest

from mqcore.errors import ValidationError
from mqcore.store.config import StoreConfig


def test_defaults_are_rocketmqs() -> None:
    c = StoreConfig()
    # MessageStoreConfig: mappedFileSizeCommitLog, mappedFileSizeConsumeQueue (300,000 units),
    # maxHashSlotNum, maxIndexNum, maxMessageSize, fileReservedTime, deleteWhen and the ratios.
    assert c.commitlog_file_size == 1 << 30
    assert c.consume_queue_file_size == 300_000 * 20
    assert (c.index_hash_slots, c.index_max_entries) == (5_000_000, 20_000_000)
    assert c.max_message_size == 4 * 1024 * 1024
    assert (c.file_reserved_time_hours, c.delete_when) == (72, "04")
    assert (c.disk_max_used_space_ratio, c.disk_space_clean_forcibly_ratio) == (75, 85)
    assert c.disk_space_warning_level_ratio == 90
    assert c.flush == "async" and c.flush_interval_commitlog_ms == 500
    # Cairn's own choice (deletion_policy.py): never delete unconsumed data to free space.
    assert c.disk_clean_forcibly_unconsumed is False


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("commitlog_file_size", 4095, "must be at least 4096 bytes"),
        ("consume_queue_file_entries", 1, "must be at least 2"),
        ("index_hash_slots", 0, "must be at least 1"),
        ("index_max_entries", 1, "must be at least 2"),
        ("flush", "sometimes", "must be 'async' or 'sync'"),
        ("max_message_size", 0, "must be positive"),
        ("commitlog_prefault_bytes", -1, "must be >= 0"),
    ],
)
def test_a_bad_value_names_the_field_and_the_rule(field: str, value: object, rule: str) -> None:
    with pytest.raises(ValidationError) as raised:
        StoreConfig(**{field: value})  # type: ignore[arg-type]
    assert str(raised.value) == f"StoreConfig.{field}: {rule}"


def test_the_smallest_valid_geometry_is_accepted() -> None:
    c = StoreConfig(
        commitlog_file_size=4096,
        consume_queue_file_entries=2,
        index_hash_slots=1,
        index_max_entries=2,
    )
    assert c.consume_queue_file_size == 40
