"""Tiered storage settings, RocketMQ ``tieredstore`` ``MessageStoreConfig`` defaults (spec 10)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from mqcore.store.consume_queue import CQ_UNIT_SIZE

GIB = 1024 * 1024 * 1024
MIB = 1024 * 1024


class ReadStrategy(enum.IntEnum):
    """RocketMQ ``tieredStorageLevel``: when a read is served from the tier (spec 10)."""

    DISABLE = 0
    NOT_IN_DISK = 1
    NOT_IN_MEM = 2
    FORCE = 3


@dataclass(frozen=True, slots=True)
class TieredConfig:
    """Segment sizes, group-commit thresholds, read and retention settings.

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
        initial_window_ms: a queue the tier does not know yet starts at the local offset
            stored this long ago (RocketMQ: 2 min), clamped to the local [min, max]; None
            starts at the local min offset (upload everything still on disk).
        key_index_segment_bytes: a key-index segment rolls at this size (whole entries).
        read_strategy: ``tieredStorageLevel`` (NOT_IN_DISK).
        in_memory_ratio: NOT_IN_MEM treats a message as out of the page cache once it lies
            more than this fraction of physical RAM behind the CommitLog end
            (``accessMessageInMemoryMaxRatio`` 40 %, the ``checkInMemByConsumeOffset``
            heuristic).
        read_ahead_count, read_ahead_bytes: read-ahead cache bounds (4096 messages, 16 MiB).
        read_ahead_expire_ms: a cached message is dropped this long after it was read (15 s).
        read_ahead_batch: messages one cold read fetches from the tier at least (the rest
            goes to the cache for the sequential reads that follow).
        reserved_hours: tier retention (``tieredStoreFileReservedTime`` 72 h); the topic
            attribute ``reserve.time`` (hours) overrides it; <= 0 keeps forever.
    """

    commit_log_segment_size_bytes: int = GIB
    consume_queue_segment_size_bytes: int = 100 * MIB
    group_commit_count: int = 4096
    group_commit_size_bytes: int = 4 * MIB
    group_commit_timeout_ms: int = 30_000
    initial_window_ms: int | None = 120_000
    key_index_segment_bytes: int = 64 * MIB
    read_strategy: ReadStrategy = ReadStrategy.NOT_IN_DISK
    in_memory_ratio: float = 0.4
    read_ahead_count: int = 4096
    read_ahead_bytes: int = 16 * MIB
    read_ahead_expire_ms: int = 15_000
    read_ahead_batch: int = 256
    reserved_hours: float = 72

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
        if self.initial_window_ms is not None and self.initial_window_ms < 0:
            raise ValueError("initial_window_ms must be >= 0 or None")
        if self.key_index_segment_bytes <= 0:
            raise ValueError("key_index_segment_bytes must be > 0")
        if not 0 < self.in_memory_ratio <= 1:
            raise ValueError("in_memory_ratio must be in (0, 1]")
        if min(self.read_ahead_count, self.read_ahead_bytes, self.read_ahead_batch) < 0:
            raise ValueError("read-ahead bounds must be >= 0")
        if self.read_ahead_expire_ms < 0:
            raise ValueError("read_ahead_expire_ms must be >= 0")


#: Backends ``CAIRN_TIERED_BACKEND`` accepts; ``none`` turns tiered storage off.
BACKENDS = ("none", "posix", "s3", "memory")

#: variable -> (TieredConfig field, parser); the runtime applies them (``cairn/env.py``
#: documents them).
TIERED_VARIABLES: dict[str, tuple[str, type]] = {
    "CAIRN_TIERED_RESERVED_HOURS": ("reserved_hours", float),
    "CAIRN_TIERED_GROUP_COMMIT_COUNT": ("group_commit_count", int),
    "CAIRN_TIERED_GROUP_COMMIT_BYTES": ("group_commit_size_bytes", int),
    "CAIRN_TIERED_GROUP_COMMIT_TIMEOUT_MS": ("group_commit_timeout_ms", int),
}


def tiered_config_from_env(env: Mapping[str, str]) -> TieredConfig:
    """A TieredConfig from ``CAIRN_TIERED_*`` variables (the read strategy too).

    Raises:
        ValueError: a malformed value (the message names the variable).
    """
    values: dict[str, object] = {}
    for name, (field_name, parse) in TIERED_VARIABLES.items():
        raw = env.get(name, "").strip()
        if raw:
            try:
                values[field_name] = parse(raw)
            except ValueError:
                raise ValueError(f"{name}: expected a number, got {raw!r}") from None
    raw = env.get("CAIRN_TIERED_READ_STRATEGY", "").strip().upper()
    if raw:
        try:
            values["read_strategy"] = ReadStrategy[raw]
        except KeyError:
            names = ", ".join(s.name for s in ReadStrategy)
            raise ValueError(f"CAIRN_TIERED_READ_STRATEGY: expected one of {names}") from None
    return TieredConfig(**values)  # type: ignore[arg-type]
