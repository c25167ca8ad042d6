"""StoreConfig: every knob of the store, with RocketMQ's defaults (spec Appendix A, 6.2–6.4).

Tests shrink the segment sizes so that rolling, cleanup and recovery across files are
exercised with a few kilobytes of data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mqcore.format.msgid import HostAddress

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


@dataclass(frozen=True)
class StoreConfig:
    """Store settings. Sizes in bytes unless the name says otherwise."""

    # Segment geometry (spec 2.2, 3.1, 4.1).
    commitlog_file_size: int = 1024 * 1024 * 1024
    consume_queue_file_entries: int = 300_000
    index_hash_slots: int = 5_000_000
    index_max_entries: int = 20_000_000

    # Writes (spec 1.6, 6.2).
    flush: Literal["async", "sync"] = "async"
    max_message_size: int = 4 * 1024 * 1024
    sync_flush_timeout_ms: int = 5_000
    flush_interval_commitlog_ms: int = 500
    flush_commitlog_least_pages: int = 4
    flush_commitlog_thorough_interval_ms: int = 10_000
    flush_interval_consume_queue_ms: int = 1_000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval_ms: int = 60_000
    #: Bytes of the current CommitLog segment kept faulted in ahead of the write position by
    #: a background thread (``prefault.py``, RocketMQ ``warmMappedFileEnable``): first writes
    #: into a fresh page then cost the put no page fault. Nothing is written into the file.
    #: Capped at 1/16 of ``commitlog_file_size`` (populated pages take disk blocks); 0 or a
    #: window under a page disables it; a no-op where ``madvise(MADV_POPULATE_WRITE)`` is
    #: missing (Linux < 5.14).
    commitlog_prefault_bytes: int = 4 * 1024 * 1024

    # Recovery and dispatch (spec 5.5, 6.1).
    check_crc_on_recover: bool = True
    message_index_enable: bool = True
    message_delay_level: str = DEFAULT_DELAY_LEVELS

    # Cleanup (spec 6.4).
    file_reserved_time_hours: float = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_warning_level_ratio: int = 90
    disk_space_clean_forcibly_ratio: int = 85
    delete_file_batch_max: int = 10
    destroy_mapped_file_interval_forcibly_ms: int = 120_000
    clean_resource_interval_ms: int = 10_000
    #: Let forced cleanup (disk over the force ratio) delete CommitLog segments younger than
    #: the retention, or holding messages a subscribed group has not consumed: RocketMQ's
    #: behaviour. Off by default: the broker refuses puts instead (``deletion_policy.py``).
    disk_clean_forcibly_unconsumed: bool = False

    # Identity: what offsetMsgIds carry (spec 2.3) and what RocketMQ shows as the broker.
    store_host: HostAddress = field(default_factory=lambda: HostAddress("127.0.0.1", 10911))
    broker_name: str = "broker-a"
    cluster_name: str = "DefaultCluster"

    def __post_init__(self) -> None:
        checks = [
            (
                "commitlog_file_size",
                self.commitlog_file_size >= 4096,
                "must be at least 4096 bytes",
            ),
            (
                "consume_queue_file_entries",
                self.consume_queue_file_entries >= 2,
                "must be at least 2",
            ),
            ("index_hash_slots", self.index_hash_slots >= 1, "must be at least 1"),
            ("index_max_entries", self.index_max_entries >= 2, "must be at least 2"),
            ("flush", self.flush in ("async", "sync"), "must be 'async' or 'sync'"),
            ("max_message_size", self.max_message_size >= 1, "must be positive"),
            ("commitlog_prefault_bytes", self.commitlog_prefault_bytes >= 0, "must be >= 0"),
        ]
        for name, ok, rule in checks:
            if not ok:
                from mqcore.errors import ValidationError

                raise ValidationError(name, rule, f"StoreConfig.{name}: {rule}")

    @property
    def consume_queue_file_size(self) -> int:
        return self.consume_queue_file_entries * 20
