"""Fetch (1) and ListOffsets (2): kafka-protocol.md sections 2.6 and 2.7.

Fetch reads each partition with :meth:`Broker.pull` (no group: Kafka fetches are
group-less) and rebuilds one uncompressed record batch v2 per partition from the stored
messages (``mapping.message_to_record``): base offset = the first message's queue offset,
deltas from it, producer fields -1, fresh CRC-32C. A partition gets at least its first
message even past ``partition_max_bytes`` (KIP-74), then messages up to that limit and
up to the request's ``max_bytes`` overall.

Long poll: when nothing is found and ``max_wait_ms`` > 0, the handler awaits
:meth:`Broker.wait_for_messages_async` over all fetched partitions, which returns as soon
as reput dispatches a message for any of them (not after ``max_wait_ms``), then reads
again. ``min_bytes`` is treated as "any data" (clients send 1).

Fetch sessions are never created (``session_id`` 0): clients keep sending full fetches.
``high_watermark`` = ``last_stable_offset`` = the queue's max offset (no transactions);
``log_start_offset`` = its min offset. An offset outside [min, max] → OFFSET_OUT_OF_RANGE.

ListOffsets: -1 → the queue's max offset, -2 → its min offset, a timestamp → the first
offset whose record timestamp (born timestamp: Kafka's CreateTime) is at or after it,
found by binary search over the queue (born timestamps are taken as non-decreasing,
which holds for one producer's records; Kafka's running-maximum index gives the same
answer then), or -1 when there is none.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from mqcore.broker.broker import Broker
from mqcore.broker.types import PullStatus
from mqcore.errors import MQError, NotFoundError, ValidationError
from mqcore.message import MessageExt

from .. import mapping
from ..errors import ErrorCode, error_code_for
from ..records import encode_batch
from .context import Call, KafkaContext
from .topics import kafka_topic

_READ_ERRORS: dict[type[BaseException], ErrorCode] = {
    NotFoundError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ValidationError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,  # partition out of range
}
MAX_PULL_COUNT = 1024  # BrokerConfig.max_pull_count's default


@dataclass(slots=True)
class _Part:
    """One requested partition and, after a read, its response fields."""

    topic: str  # Kafka name
    store_topic: str | None  # None: not a topic Kafka may read
    partition: int
    offset: int
    max_bytes: int
    error: int = 0
    high_watermark: int = -1
    log_start: int = -1
    records: bytes | None = None

    @property
    def size(self) -> int:
        return len(self.records) if self.records else 0


def _read(broker: Broker, part: _Part, budget: int, max_records: int) -> None:
    """Read one partition into ``part`` (records bounded by ``budget`` bytes)."""
    if part.store_topic is None:
        part.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return
    if budget <= 0:  # max_bytes reached by earlier partitions: bounds only
        part.records = b""
        try:
            status = broker.queue_status(part.store_topic, part.partition)
        except MQError as exc:
            part.error = error_code_for(exc, _READ_ERRORS)
            return
        part.high_watermark, part.log_start = status.max_offset, status.min_offset
        return
    messages: list[MessageExt] = []
    offset = part.offset
    limit = max(1, min(part.max_bytes, budget))
    used = 0
    try:
        while True:
            count = min(MAX_PULL_COUNT, max_records - len(messages))
            result = broker.pull(
                None,
                part.store_topic,
                part.partition,
                offset,
                count,
                max_bytes=max(1, limit - used),
            )
            part.high_watermark = result.max_offset
            part.log_start = result.min_offset
            if result.status is PullStatus.OFFSET_ILLEGAL:
                part.error = ErrorCode.OFFSET_OUT_OF_RANGE
                return
            if not result.messages:
                break
            messages += result.messages
            used += sum(m.store_size for m in result.messages)
            offset = result.next_offset
            if used >= limit or len(messages) >= max_records or len(result.messages) < count:
                break
    except MQError as exc:
        part.error = error_code_for(exc, _READ_ERRORS)
        return
    if not messages:
        part.records = b""
        return
    base = messages[0].queue_offset
    part.records = encode_batch(
        [mapping.message_to_record(m, base) for m in messages], base_offset=base
    )


def _read_all(ctx: KafkaContext, parts: list[_Part], max_bytes: int) -> int:
    """Read every partition; returns the record bytes found. Runs in a worker thread."""
    total = 0
    for part in parts:
        part.error = 0
        part.records = None
        budget = max_bytes - total if total else max_bytes  # the first data always fits
        _read(ctx.broker, part, budget, ctx.config.max_fetch_records)
        total += part.size
    return total


def _store_topic(broker: Broker, name: str) -> str | None:
    info = kafka_topic(broker, name)
    return info.name if info is not None else None


def _parse(ctx: KafkaContext, request: dict[str, Any]) -> list[_Part]:
    parts: list[_Part] = []
    for topic in request["topics"]:
        store_topic = _store_topic(ctx.broker, topic["topic"])
        for p in topic["partitions"]:
            parts.append(
                _Part(
                    topic["topic"],
                    store_topic,
                    p["partition"],
                    p["fetch_offset"],
                    p["partition_max_bytes"],
                )
            )
    return parts


async def fetch(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Read the partitions; long-poll when nothing is there yet."""
    request = call.request
    max_bytes = max(1, request["max_bytes"])
    parts = await asyncio.to_thread(_parse, ctx, request)
    found = await asyncio.to_thread(_read_all, ctx, parts, max_bytes)
    wait_ms = request["max_wait_ms"]
    errors = any(p.error for p in parts)
    if found == 0 and not errors and wait_ms > 0 and request["min_bytes"] > 0:
        refs = [
            (p.store_topic, p.partition, p.offset)
            for p in parts
            if p.store_topic is not None and p.error == 0
        ]
        if refs and await ctx.broker.wait_for_messages_async(refs, wait_ms):
            await asyncio.to_thread(_read_all, ctx, parts, max_bytes)
    return _response(parts)


def _response(parts: list[_Part]) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for p in parts:
        by_topic.setdefault(p.topic, []).append(
            {
                "partition_index": p.partition,
                "error_code": int(p.error),
                "high_watermark": p.high_watermark,
                "last_stable_offset": p.high_watermark,
                "log_start_offset": p.log_start,
                "aborted_transactions": None,
                "preferred_read_replica": -1,
                "records": p.records if p.error == 0 else None,
            }
        )
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
    }


# -- ListOffsets -------------------------------------------------------------------------

LATEST = -1
EARLIEST = -2


def _born_at(broker: Broker, topic: str, partition: int, offset: int) -> int | None:
    result = broker.pull(None, topic, partition, offset, 1)
    return result.messages[0].born_timestamp if result.messages else None


def offset_for_timestamp(
    broker: Broker, topic: str, partition: int, timestamp: int
) -> tuple[int, int]:
    """``(offset, record timestamp)`` of the first record with timestamp >= ``timestamp``,
    or ``(-1, -1)``. Binary search over born timestamps (see the module docstring)."""
    lo = broker.store.min_offset(topic, partition)
    hi = broker.store.max_offset(topic, partition)
    while lo < hi:
        mid = (lo + hi) // 2
        born = _born_at(broker, topic, partition, mid)
        if born is None or born >= timestamp:
            hi = mid
        else:
            lo = mid + 1
    found = (
        _born_at(broker, topic, partition, lo)
        if lo < broker.store.max_offset(topic, partition)
        else None
    )
    if found is None or found < timestamp:
        return -1, -1
    return lo, found


def _list_one(broker: Broker, store_topic: str | None, partition: int, ts: int) -> dict[str, Any]:
    reply: dict[str, Any] = {
        "partition_index": partition,
        "error_code": 0,
        "timestamp": -1,
        "offset": -1,
    }
    if store_topic is None:
        reply["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return reply
    try:
        if ts == LATEST:
            reply["offset"] = broker.list_offsets(store_topic, partition, "latest")
        elif ts == EARLIEST:
            reply["offset"] = broker.list_offsets(store_topic, partition, "earliest")
        elif ts >= 0:
            broker.queue_status(store_topic, partition)  # checks the partition exists
            reply["offset"], reply["timestamp"] = offset_for_timestamp(
                broker, store_topic, partition, ts
            )
        else:
            reply["error_code"] = int(ErrorCode.UNSUPPORTED_VERSION)
    except MQError as exc:
        reply["error_code"] = int(error_code_for(exc, _READ_ERRORS))
    if (
        reply["error_code"] == 0
        and not 0 <= partition < broker.get_topic(store_topic).read_queue_nums
    ):
        reply.update(error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), offset=-1)
    return reply


def _list_all(ctx: KafkaContext, request: dict[str, Any]) -> list[dict[str, Any]]:
    topics = []
    for topic in request["topics"]:
        store_topic = _store_topic(ctx.broker, topic["name"])
        partitions = [
            _list_one(ctx.broker, store_topic, p["partition_index"], p["timestamp"])
            for p in topic["partitions"]
        ]
        topics.append({"name": topic["name"], "partitions": partitions})
    return topics


async def list_offsets(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Offsets for -1 (latest), -2 (earliest) or a timestamp, per partition."""
    topics = await asyncio.to_thread(_list_all, ctx, call.request)
    return {"throttle_time_ms": 0, "topics": topics}
