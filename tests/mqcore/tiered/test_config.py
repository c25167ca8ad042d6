"""TieredConfig defaults (spec 10) and argument checks."""

from __future__ import annotations

import pytest

from mqcore.tiered import TieredConfig


def test_defaults_are_rocketmq_code_defaults() -> None:
    config = TieredConfig()
    assert config.commit_log_segment_size_bytes == 1024**3
    assert config.consume_queue_segment_size_bytes == 100 * 1024**2
    assert (config.group_commit_count, config.group_commit_size_bytes) == (4096, 4 * 1024**2)
    assert config.group_commit_timeout_ms == 30_000


@pytest.mark.parametrize(
    "kwargs",
    [
        {"commit_log_segment_size_bytes": 0},
        {"consume_queue_segment_size_bytes": 30},
        {"group_commit_count": 0},
        {"group_commit_size_bytes": -1},
        {"group_commit_timeout_ms": -1},
    ],
)
def test_bad_values_raise(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        TieredConfig(**kwargs)
