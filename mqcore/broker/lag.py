"""Consumer progress: lag per queue (messages and milliseconds) and offset-reset plans.

Lag of a group on a queue = ``max_offset - start``, where ``start`` is the committed offset, or
the queue's min offset when the group never committed there (what a ``consume_from_min``
group would read first). Its age, ``lag_ms``, is now minus the store time of the message at
``start``: how long the oldest unconsumed message has waited.

A reset computes the new offset of each queue (earliest = min, latest = max, a timestamp =
the first message stored at or after it (spec 7.2, LOWER), or explicit offsets clamped into
[min, max]) and returns the plan; it commits only when it is not a dry run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from mqcore.broker.reader import StoreReader
from mqcore.broker.types import OffsetResetPlan, QueueLag, QueueStatus
from mqcore.clock import Clock
from mqcore.errors import ValidationError
from mqcore.metadata import TopicConfig

ResetTo = Literal["earliest", "latest"]


def queue_ids(store: StoreReader, config: TopicConfig | None, topic: str) -> list[int]:
    """The topic's queues: ``0..max(read, write)-1`` plus any queue found on disk."""
    known = set(store.queues.queues(topic))
    if config is not None:
        known.update(range(max(config.read_queue_nums, config.write_queue_nums)))
    return sorted(known)


def store_time_at(store: StoreReader, topic: str, queue_id: int, offset: int) -> int:
    """Store time of the message at ``offset`` of a queue, or 0 if there is none."""
    queue = store.queues.get(topic, queue_id)
    unit = queue.unit_at(offset) if queue is not None else None
    if unit is None:  # not on local disk: a tiered reader may still have it
        got = store.get_messages("", topic, queue_id, offset, 1)
        first = got.messages[0] if got.messages else None
        return first.store_timestamp if first is not None and first.queue_offset == offset else 0
    return max(0, store.commit_log.store_time_of(unit.phys_offset, unit.size))


def queue_status(store: StoreReader, broker_name: str, topic: str, queue_id: int) -> QueueStatus:
    low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    last = store_time_at(store, topic, queue_id, high - 1) if high > low else 0
    return QueueStatus(topic, queue_id, broker_name, low, high, last)


def queue_lag(
    store: StoreReader,
    clock: Clock,
    broker_name: str,
    topic: str,
    queue_id: int,
    committed: int | None,
) -> QueueLag:
    low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    start = max(low, committed) if committed is not None else low
    lag = max(0, high - start)
    oldest = store_time_at(store, topic, queue_id, start) if lag else 0
    lag_ms = max(0, clock.now_ms() - oldest) if oldest else 0
    return QueueLag(topic, queue_id, broker_name, high, committed, lag, lag_ms, oldest)


def _lag(store: StoreReader, topic: str, queue_id: int, offset: int | None) -> int:
    low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    start = low if offset is None else max(low, offset)
    return max(0, high - start)


def reset_targets(
    store: StoreReader,
    config: TopicConfig,
    *,
    to: ResetTo | None,
    timestamp_ms: int | None,
    offsets: Mapping[int, int] | None,
) -> dict[int, int]:
    """New offset per queue for exactly one of ``to``, ``timestamp_ms``, ``offsets``.

    Raises:
        ValidationError: none or several targets (rule ``one_target``), an unknown ``to``,
            a negative timestamp or offset, or a queue id the topic does not have.
    """
    candidates = (("to", to), ("timestamp_ms", timestamp_ms), ("offsets", offsets))
    given = [name for name, value in candidates if value is not None]
    if len(given) != 1:
        raise ValidationError(
            "to",
            "one_target",
            "give exactly one of to ('earliest' or 'latest'), timestamp_ms or offsets"
            + (f" (got {', '.join(given)})" if given else ""),
        )
    topic = config.topic_name
    if offsets is not None:
        return _explicit_targets(store, config, offsets)
    ids = queue_ids(store, config, topic)
    if to is not None:
        if to not in ("earliest", "latest"):
            raise ValidationError(
                "to", "choice", f"to: must be 'earliest' or 'latest' (got {to!r})"
            )
        pick = store.min_offset if to == "earliest" else store.max_offset
        return {q: pick(topic, q) for q in ids}
    assert timestamp_ms is not None
    if timestamp_ms < 0:
        raise ValidationError("timestamp_ms", "range", "timestamp_ms: must be >= 0")
    return {q: offset_at_time(store, topic, q, timestamp_ms) for q in ids}


def offset_at_time(store: StoreReader, topic: str, queue_id: int, timestamp_ms: int) -> int:
    """First offset stored at or after ``timestamp_ms`` (the max offset if none), clamped."""
    low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    if high <= low:
        return high
    return max(low, min(high, store.offset_for_time(topic, queue_id, timestamp_ms)))


def _explicit_targets(
    store: StoreReader, config: TopicConfig, offsets: Mapping[int, int]
) -> dict[int, int]:
    topic = config.topic_name
    limit = max(config.read_queue_nums, config.write_queue_nums)
    targets = {}
    for queue_id, offset in sorted(offsets.items()):
        if not 0 <= queue_id < limit:
            raise ValidationError(
                "offsets",
                "queue_range",
                f"offsets: topic {topic!r} has queues 0..{limit - 1} (got queue {queue_id})",
            )
        if offset < 0:
            raise ValidationError(
                "offsets", "range", f"offsets: queue {queue_id} offset must be >= 0 (got {offset})"
            )
        low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        targets[queue_id] = max(low, min(high, offset))
    return targets


def plan_reset(
    store: StoreReader,
    broker_name: str,
    topic: str,
    committed: Mapping[int, int],
    targets: Mapping[int, int],
) -> list[OffsetResetPlan]:
    """Old/new offset and lag before/after per queue, sorted by queue id."""
    return [
        OffsetResetPlan(
            topic,
            queue_id,
            broker_name,
            committed.get(queue_id),
            new,
            _lag(store, topic, queue_id, committed.get(queue_id)),
            _lag(store, topic, queue_id, new),
        )
        for queue_id, new in sorted(targets.items())
    ]
