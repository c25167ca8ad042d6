"""Tier retention (spec 10: ``tieredStoreFileReservedTime`` 72 h, checked every hour).

One :func:`retention_step` goes over every queue the tier holds: the topic's reserve time is
its ``reserve.time`` attribute (whole hours; RocketMQ's topic attribute) when set and
positive, else ``TieredConfig.reserved_hours``; a value <= 0 keeps everything. Sealed flat
CommitLog segments whose newest message is older than that go (``FlatFile.expire``: the
min offset moves past them and the flat ConsumeQueue segments below it go too), then the
key-index segments that only point below the new min offset.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mqcore.errors import StoreError
from mqcore.tiered.storage import TieredStorage

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
RESERVE_TIME_ATTRIBUTE = "reserve.time"

#: topic -> its attributes (None: unknown topic); the broker's metadata provides it.
TopicAttributes = Callable[[str], dict[str, str] | None]


@dataclass(slots=True)
class RetentionResult:
    deleted_segments: list[str] = field(default_factory=list)
    queues: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def progressed(self) -> bool:
        return bool(self.deleted_segments)

    def as_dict(self) -> dict[str, Any]:
        return {
            "deleted_segments": list(self.deleted_segments),
            "queues": self.queues,
            "errors": list(self.errors),
        }


def reserve_hours(tier: TieredStorage, attributes: dict[str, str] | None) -> float:
    """The topic's ``reserve.time`` (hours) if set and positive, else the tier default."""
    raw = (attributes or {}).get(RESERVE_TIME_ATTRIBUTE, "").strip()
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        value = 0.0
    return value if value > 0 else tier.config.reserved_hours


def retention_step(
    tier: TieredStorage, topic_attributes: TopicAttributes | None = None
) -> RetentionResult:
    """One pass (module docstring). A queue's error is reported, never raised."""
    result = RetentionResult()
    now = tier.clock.now_ms()
    for topic, queue_id in tier.queues():
        result.queues += 1
        hours = reserve_hours(tier, topic_attributes(topic) if topic_attributes else None)
        if hours <= 0:
            continue
        flat = tier.flat_file(topic, queue_id)
        if flat is None:
            continue
        try:
            gone = flat.expire(now - int(hours * HOUR_MS))
            gone += tier.key_index.delete_below(topic, queue_id, flat.min_offset)
        except (StoreError, OSError) as exc:
            result.errors.append(f"{topic}/{queue_id}: {type(exc).__name__}: {exc}")
            log.warning("tier retention of %s/%s failed: %s", topic, queue_id, exc)
            continue
        result.deleted_segments += [str(s) for s in gone]
    return result
