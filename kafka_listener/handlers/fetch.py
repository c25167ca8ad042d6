"""Fetch (1) and ListOffsets (2): kafka-protocol.md sections 2.6 and 2.7.

Fetch serves each partition from the listener's cache of produced batches when it holds
the fetch offset (``batch_cache.py``: the produced batch itself, base offset rewritten,
after a one-message check that the store still holds what was produced there), else
reads the store and rebuilds one uncompressed record batch v2 from the stored records:
base offset = the first record's queue offset, deltas from it, producer fields -1, fresh
CRC-32C. Offsets in the local store are read as raw record views with
:meth:`Broker.pull_records` (no group: Kafka fetches are group-less) and encoded from their
bytes (``view_records.ViewBatch``); with a tiered reader, or below the local min offset,
through :meth:`Broker.pull` and ``mapping.message_to_record`` (the tier serves cold
offsets). Runs of usual records (keyless Kafka records, plain REST messages) are read
as one CommitLog copy (``store_runs.py``) and encoded with numpy (``run_records.py``):
~0.9 us a record in-process against ~3.8 us through record views (200,000 keyless
100-byte records, ``_read_local`` with a 1 MiB limit). All three give the same bytes for
the same records. A partition gets at least its
first batch or message even past ``partition_max_bytes`` (KIP-74), then more up to that
limit (counted in Kafka bytes on the local path: as many records as the client allows, not
as many as fit in that many store bytes) and up to the request's ``max_bytes`` overall.

Read-ahead (``read_ahead.py``): after a local store read that stopped before the end of
the queue, the batch from where it stopped, with the same limits, is built in a background
thread; the consumer's next Fetch takes it (waiting for it if need be) after a one-record
check that the store still holds the same record at its first offset. The broker builds
while the client receives and handles the previous answer. A cached zstd batch is served to Fetch v10+ only
(older versions cannot carry zstd); others read the store.

Long poll: when nothing is found and ``max_wait_ms`` > 0, the handler waits in
:class:`~kafka_listener.arrivals.Arrivals` over all fetched partitions, which returns as
soon as reput dispatches a record for any of them (not after ``max_wait_ms``), then reads
again. ``min_bytes`` is treated as "any data" (clients send 1).

Fetch sessions are never created (``session_id`` 0): clients keep sending full fetches.
``high_watermark`` = ``last_stable_offset`` = the queue's max offset (no transactions);
``log_start_offset`` = its min offset. An offset outside [min, max] → OFFSET_OUT_OF_RANGE.
A topic the connection may not READ → TOPIC_AUTHORIZATION_FAILED for its partitions.

ListOffsets: -1 → the queue's max offset, -2 → its min offset, a timestamp → the first
offset whose record timestamp (born timestamp: Kafka's CreateTime) is at or after it,
found by binary search over the queue (born timestamps are taken as non-decreasing,
which holds for one producer's records; Kafka's running-maximum index gives the same
answer then), or -1 when there is none. Needs DESCRIBE on the topic (else 29).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

from mqcore.access.model import Operation
from mqcore.broker.broker import Broker
from mqcore.broker.types import PullStatus
from mqcore.errors import MQError, NotFoundError, ValidationError
from mqcore.message import MessageExt

from .. import mapping
from ..batch_cache import BatchCache, CachedBatch
from ..compression import Compression
from ..errors import ErrorCode, error_code_for
from ..read_ahead import ReadAhead
from ..records import encode_batch
from ..store_runs import read_run
from ..view_records import ViewBatch
from .authz import topic_resource
from .context import Call, KafkaContext
from .topics import kafka_topic

_READ_ERRORS: dict[type[BaseException], ErrorCode] = {
    NotFoundError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ValidationError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,  # partition out of range
}
_UNIQ_KEY = "UNIQ_KEY"
ZSTD_FETCH_VERSION = 10  # Kafka refuses zstd batches to older Fetch versions
# A store record is larger than its Kafka record (about 130 bytes of header, topic and
# properties against about 10), so a pull for N Kafka bytes may read more store bytes.
_STORE_BYTES_PER_KAFKA_BYTE = 4


@dataclass(slots=True)
class _Part:
    """One requested partition and, after a read, its response fields."""

    topic: str  # Kafka name
    store_topic: str | None  # None: not a topic Kafka may read
    partition: int
    offset: int
    max_bytes: int
    refused: int = 0  # TOPIC_AUTHORIZATION_FAILED: the connection may not READ the topic
    error: int = 0
    high_watermark: int = -1
    log_start: int = -1
    records: bytes | None = None

    @property
    def size(self) -> int:
        return len(self.records) if self.records else 0


@dataclass(frozen=True, slots=True)
class _CacheUse:
    cache: BatchCache
    zstd: bool  # the Fetch version can carry zstd batches (v10+)


def _read(
    broker: Broker,
    part: _Part,
    budget: int,
    max_records: int,
    cache: _CacheUse | None,
    ahead: ReadAhead[_Local] | None = None,
) -> None:
    """Read one partition into ``part`` (records bounded by ``budget`` bytes)."""
    if part.refused:
        part.error = part.refused
        return
    if part.store_topic is None:
        part.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return
    if budget <= 0:  # max_bytes reached by earlier partitions: bounds only
        part.records = b""
        try:
            status = broker.admin.queue_status(part.store_topic, part.partition)
        except MQError as exc:
            part.error = error_code_for(exc, _READ_ERRORS)
            return
        part.high_watermark, part.log_start = status.max_offset, status.min_offset
        return
    limit = max(1, min(part.max_bytes, budget))
    if cache is not None and _read_cached(broker, part, limit, max_records, cache):
        return
    topic, partition, offset = part.store_topic, part.partition, part.offset
    try:
        if broker.reader is broker.store and offset >= broker.store.min_offset(topic, partition):
            local = None
            if ahead is not None:
                local = _take_ahead(broker, ahead, topic, partition, offset, limit, max_records)
            if local is None:
                local = _read_local(broker, topic, partition, offset, limit, max_records)
            part.error, part.records = local.error, local.records if not local.error else None
            part.high_watermark, part.log_start = local.high_watermark, local.log_start
            if ahead is not None and local.records and local.next_offset < local.high_watermark:
                start = local.next_offset
                ahead.start(
                    (topic, partition, start),
                    limit,
                    lambda: _read_local(broker, topic, partition, start, limit, max_records),
                )
        else:
            _read_pulled(broker, part, limit, max_records)
    except MQError as exc:
        part.error = error_code_for(exc, _READ_ERRORS)


@dataclass(frozen=True, slots=True)
class _Local:
    """A store-path read of one partition: the batch (``b""``: none) and the pulls' view."""

    records: bytes
    error: int
    high_watermark: int
    log_start: int
    first_phys: int  # CommitLog position of the batch's first record (-1: no records)
    next_offset: int  # the offset after the batch's last record
    count: int  # records in the batch


def _read_local(
    broker: Broker, topic: str, partition: int, offset: int, limit: int, max_records: int
) -> _Local:
    """Read the local store raw and encode the batch from the record bytes
    (``view_records.ViewBatch``): no MessageExt per record. Runs of usual records come
    from ``store_runs.read_run`` and are encoded with numpy (``ViewBatch.add_run``, the
    same bytes); from a record a run cannot encode (or for a short read, at the tail of the
    queue), one chunk goes through record views (``Broker.pull_records``, ``ViewBatch.add``),
    then runs again.

    The batch is filled up to ``limit`` Kafka bytes (the client's allowance), pulling the
    store chunk by chunk; each pull asks for at most ``_STORE_BYTES_PER_KAFKA_BYTE`` times
    the Kafka bytes still free, so a pull of large records stays bounded.

    Raises:
        MQError: from the pulls (unknown topic, partition out of range, no permission).
    """
    batch = ViewBatch(limit)
    pull_count = broker.config.max_pull_count
    first_phys = -1
    start = offset
    runs = True  # read_run's raw runs until one starts with a record they do not encode
    while True:
        if runs:
            room = max(1, (limit - batch.size) * _STORE_BYTES_PER_KAFKA_BYTE)
            run = read_run(broker, topic, partition, offset, max_records - batch.count, room)
            if run is not None:
                low, high = run.min_offset, run.max_offset
                if first_phys < 0:
                    first_phys = run.first_phys
                taken, full = batch.add_run(run.data, run.positions, run.sizes, offset)
                offset += taken
                if full or batch.count >= max_records or offset >= high:
                    break
                runs = taken > 0
                if taken == len(run):
                    continue
            # else, or a record the run could not encode: one chunk of record views
        if batch.count and batch.size >= limit:  # full (the first record went past it)
            break
        count = min(pull_count, max_records - batch.count)
        if batch.count:  # records are alike: pull about as many as still fit, plus one
            count = min(count, (limit - batch.size) * batch.count // batch.body_size + 1)
        store_bytes = max(1, (limit - batch.size) * _STORE_BYTES_PER_KAFKA_BYTE)
        status, result = broker.pull_records(topic, partition, offset, count, store_bytes)
        if status is PullStatus.OFFSET_ILLEGAL:
            error = ErrorCode.OFFSET_OUT_OF_RANGE
            return _Local(b"", error, result.max_offset, result.min_offset, -1, start, 0)
        low, high = result.min_offset, result.max_offset
        records = result.records
        if not records:
            break
        if first_phys < 0:
            first_phys = records[0].phys_offset
        taken = batch.add(records)
        # The first record not taken, or where the pull ended.
        offset = records[taken].queue_offset if taken < len(records) else result.next_offset
        if taken < len(records) or batch.count >= max_records or offset >= high:
            break
    data = batch.finish() if batch.count else b""
    return _Local(data, 0, high, low, first_phys, offset, batch.count)


def _take_ahead(
    broker: Broker,
    ahead: ReadAhead[_Local],
    topic: str,
    partition: int,
    offset: int,
    limit: int,
    max_records: int,
) -> _Local | None:
    """The read-ahead batch at this offset, if one was built, fits this read's limits and
    the store still holds the same records there (same CommitLog position of the first
    one); else None. Waits for a build under way."""
    future = ahead.take((topic, partition, offset))
    if future is None or future.cancel():  # not started (behind other builds): read now
        return None
    try:
        built = future.result()
    except Exception:  # noqa: BLE001 - cancelled or failed: the foreground read reports it
        return None
    # Built for the previous request's limits: usable if it fits this one's (a smaller
    # batch than this request allows is still a right answer).
    if built.error or not built.records or len(built.records) > limit:
        return None
    if built.count > max_records:
        return None
    # The one-record check, through the pull's own permission and range checks; it also
    # gives the current watermarks.
    status, check = broker.pull_records(topic, partition, offset, 1, 1)
    if status is PullStatus.OFFSET_ILLEGAL or not check.records:
        return None
    if check.records[0].phys_offset != built.first_phys:
        return None
    return replace(built, high_watermark=check.max_offset, log_start=check.min_offset)


def _read_pulled(broker: Broker, part: _Part, limit: int, max_records: int) -> None:
    """Read through :meth:`Broker.pull` (its reader may be tiered: cold offsets come from
    the tier) and encode the batch from the messages."""
    assert part.store_topic is not None
    messages: list[MessageExt] = []
    offset = part.offset
    used = 0
    while True:
        count = min(broker.config.max_pull_count, max_records - len(messages))
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
    if not messages:
        part.records = b""
        return
    base = messages[0].queue_offset
    to_record = mapping.message_to_record
    part.records = encode_batch([to_record(m, base) for m in messages], base_offset=base)


def _read_cached(broker: Broker, part: _Part, limit: int, max_records: int, use: _CacheUse) -> bool:
    """Serve ``part`` from cached produced batches; False (nothing set) on a miss."""
    assert part.store_topic is not None
    topic, partition = part.store_topic, part.partition
    found: list[tuple[CachedBatch, bool]] = use.cache.run(
        topic, partition, part.offset, limit, max_records
    )
    chunks: list[bytes] = []
    high_watermark = -1
    served = 0  # records served that no store read counted (the check's pull counts its one)
    for entry, check in found:
        if entry.compression == Compression.ZSTD and not use.zstd:
            break
        if check:
            try:  # the one-message check (batch_cache.py); also the pull's permission checks
                result = broker.pull(None, topic, partition, entry.base, 1)
            except MQError:
                break  # the store read reports the error
            first = result.messages[0] if result.messages else None
            if first is None or first.properties.get(_UNIQ_KEY) != entry.first_id:
                if result.status is not PullStatus.OFFSET_ILLEGAL:
                    use.cache.drop(topic, partition)  # the queue holds other records now
                break
            high_watermark = result.max_offset
            part.high_watermark, part.log_start = result.max_offset, result.min_offset
        if entry.end > high_watermark:
            break  # not all of it dispatched yet: the store read serves what is
        chunks.append(entry.data)
        served += entry.end - entry.base - (1 if check else 0)
    if not chunks:
        return False
    broker.count_gets(served, topic)  # the delivered-messages figures (Broker.status, /metrics)
    part.records = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return True


def _read_all(ctx: KafkaContext, parts: list[_Part], max_bytes: int, version: int) -> int:
    """Read every partition; returns the record bytes found. Runs in a worker thread."""
    cache = ctx.batch_cache
    use = _CacheUse(cache, version >= ZSTD_FETCH_VERSION) if cache.max_bytes > 0 else None
    ahead = ctx.read_ahead
    total = 0
    for part in parts:
        part.error = 0
        part.records = None
        budget = max_bytes - total if total else max_bytes  # the first data always fits
        _read(ctx.broker, part, budget, ctx.config.max_fetch_records, use, ahead)
        total += part.size
    return total


def _parse_and_read(
    ctx: KafkaContext, call: Call, max_bytes: int, version: int
) -> tuple[list[_Part], int]:
    parts = _parse(ctx, call)
    return parts, _read_all(ctx, parts, max_bytes, version)


def _store_topic(broker: Broker, name: str) -> str | None:
    info = kafka_topic(broker, name)
    return info.name if info is not None else None


def _refusal(ctx: KafkaContext, call: Call, name: str, operation: Operation) -> int:
    """TOPIC_AUTHORIZATION_FAILED when the connection may not do ``operation`` on topic
    ``name`` (checked before the topic's existence, as Kafka does), else 0."""
    if mapping.kafka_topic_error(name) is not None:
        return 0  # not a topic name: answered UNKNOWN_TOPIC_OR_PARTITION
    if call.check(ctx, operation, topic_resource(name)):
        return 0
    return int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def _parse(ctx: KafkaContext, call: Call) -> list[_Part]:
    parts: list[_Part] = []
    for topic in call.request["topics"]:
        name = topic["topic"]
        refused = _refusal(ctx, call, name, Operation.READ)
        store_topic = None if refused else _store_topic(ctx.broker, name)
        for p in topic["partitions"]:
            parts.append(
                _Part(
                    name,
                    store_topic,
                    p["partition"],
                    p["fetch_offset"],
                    p["partition_max_bytes"],
                    refused,
                )
            )
    return parts


async def fetch(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Read the partitions; long-poll when nothing is there yet."""
    request = call.request
    max_bytes = max(1, request["max_bytes"])
    version = call.api_version
    parts, found = await asyncio.to_thread(_parse_and_read, ctx, call, max_bytes, version)
    wait_ms = request["max_wait_ms"]
    errors = any(p.error for p in parts)
    if found == 0 and not errors and wait_ms > 0 and request["min_bytes"] > 0:
        refs = [
            (p.store_topic, p.partition, p.offset)
            for p in parts
            if p.store_topic is not None and p.error == 0
        ]
        broker_config = ctx.broker.config
        timeout_s = min(wait_ms, broker_config.max_pull_wait_ms) / 1000
        recheck_s = broker_config.long_poll_recheck_ms / 1000
        if refs and await ctx.arrivals.wait(refs, timeout_s, recheck_s):
            await asyncio.to_thread(_read_all, ctx, parts, max_bytes, version)
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
    lo = broker.reader.min_offset(topic, partition)
    hi = broker.reader.max_offset(topic, partition)
    while lo < hi:
        mid = (lo + hi) // 2
        born = _born_at(broker, topic, partition, mid)
        if born is None or born >= timestamp:
            hi = mid
        else:
            lo = mid + 1
    found = (
        _born_at(broker, topic, partition, lo)
        if lo < broker.reader.max_offset(topic, partition)
        else None
    )
    if found is None or found < timestamp:
        return -1, -1
    return lo, found


def _list_one(
    broker: Broker, store_topic: str | None, partition: int, ts: int, refused: int = 0
) -> dict[str, Any]:
    reply: dict[str, Any] = {
        "partition_index": partition,
        "error_code": refused,
        "timestamp": -1,
        "offset": -1,
    }
    if refused:
        return reply
    if store_topic is None:
        reply["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        return reply
    try:
        if ts == LATEST:
            reply["offset"] = broker.list_offsets(store_topic, partition, "latest")
        elif ts == EARLIEST:
            reply["offset"] = broker.list_offsets(store_topic, partition, "earliest")
        elif ts >= 0:
            broker.admin.queue_status(store_topic, partition)  # checks the partition exists
            reply["offset"], reply["timestamp"] = offset_for_timestamp(
                broker, store_topic, partition, ts
            )
        else:
            reply["error_code"] = int(ErrorCode.UNSUPPORTED_VERSION)
    except MQError as exc:
        reply["error_code"] = int(error_code_for(exc, _READ_ERRORS))
    if (
        reply["error_code"] == 0
        and not 0 <= partition < broker.admin.get_topic(store_topic).read_queue_nums
    ):
        reply.update(error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), offset=-1)
    return reply


def _list_all(ctx: KafkaContext, call: Call) -> list[dict[str, Any]]:
    topics = []
    for topic in call.request["topics"]:
        refused = _refusal(ctx, call, topic["name"], Operation.DESCRIBE)
        store_topic = None if refused else _store_topic(ctx.broker, topic["name"])
        partitions = [
            _list_one(ctx.broker, store_topic, p["partition_index"], p["timestamp"], refused)
            for p in topic["partitions"]
        ]
        topics.append({"name": topic["name"], "partitions": partitions})
    return topics


async def list_offsets(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Offsets for -1 (latest), -2 (earliest) or a timestamp, per partition."""
    topics = await asyncio.to_thread(_list_all, ctx, call)
    return {"throttle_time_ms": 0, "topics": topics}
