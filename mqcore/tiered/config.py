"""Tiered storage settings, RocketMQ ``tieredstore`` ``MessageStoreConfig`` defaults (spec 10)."""

from __future__ import annotations

from dataclasses import dataclass

from mqcore.store.consume_queue import CQ_UNIT_SIZE

GIB = 1024 * 1024 * 1024
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class TieredConfig:
    """Segment sizes and group-commit thresholds.

    Attributes:
        commit_log_segment_size_bytes: a flat CommitLog segment rolls before a record would
            take it past this size (``tieredStoreCommitLogMaxSize`` 1 GiB). A record larger
            than the limit gets a segment to itself: records never straddle segments.
        consume_queue_segment_size_bytes: flat ConsumeQueue segment size
            (``tieredStoreConsumeQueueMaxSize`` 100 MiB = 5,242,880 units); must be a
            multiple of the 20-byte unit.
        group_commit_count: upload once this many messages wait (code default 4096).
        group_commit_size_bytes: ... or once this many record bytes wait (4 MiB).
        group_commit_timeout_ms: ... or once the oldest waiting message was stored this long
            ago (30 s).
    """

    commit_log_segment_size_bytes: int = GIB
    consume_queue_segment_size_bytes: int = 100 * MIB
    group_commit_count: int = 4096
    group_commit_size_bytes: int = 4 * MIB
    group_commit_timeout_ms: int = 30_000

    def __post_init__(self) -> None:
        if self.commit_log_segment_size_bytes <= 0:
            raise ValueError("commit_log_segment_size_bytes must be > 0")
        cq = self.consume_queue_segment_size_bytes
        if cq <= 0 or cq % CQ_UNIT_SIZE:
            raise ValueError(
                f"consume_queue_segment_size_bytes must be a multiple of {CQ_UNIT_SIZE}"
            )
        if min(self.group_commit_count, self.group_commit_size_bytes) <= 0:
            raise ValueError("group commit thresholds must be > 0")
        if self.group_commit_timeout_ms < 0:
            raise ValueError("group_commit_timeout_ms must be >= 0")
