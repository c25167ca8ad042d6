"""Produce (0) and InitProducerId (22): kafka-protocol.md sections 2.5, 2.13 and 3.5.

A partition's ``records`` must hold exactly one v2 batch with a valid CRC-32C. Its records
are decompressed (gzip, snappy framed or raw, lz4, zstd), checked (offset deltas
0, 1, …, n-1) and stored with one put, contiguously: the batch's base offset is the
first message's queue offset. Two ways, same stored messages and same answers:

* **plain batches** (no headers, non-empty values, null or text keys: nearly all):
  ``plain_records.plain_messages`` decodes the records straight into store messages
  (columns, ``PlainColumns``, for batches of 256 records or more) and :meth:`Broker.send`
  stores them on its fast path, with no per-record objects in between;
* **everything else** (and every malformed batch, whose error the general decoder
  names): ``Record`` tuples, ``mapping.record_to_message`` and :meth:`Broker.send`'s
  reference path.

The batch as produced, base offset rewritten, goes into the listener's fetch cache
(``batch_cache.py``). The whole request runs in one worker thread. The answer waits
until reput has dispatched the records (so a consumer asked after it sees them), parked
in :class:`~kafka_listener.arrivals.Arrivals`.

Per-partition errors: INVALID_TOPIC_EXCEPTION (17) for names Cairn cannot hold;
UNKNOWN_TOPIC_OR_PARTITION (3) for unknown topics (no auto-creation on Produce; clients
create through Metadata or CreateTopics) and partitions; CORRUPT_MESSAGE (2),
INVALID_RECORD (87), UNSUPPORTED_COMPRESSION_TYPE (76) from the batch decoder;
MESSAGE_TOO_LARGE (10) for a batch over 4 MiB (``BrokerConfig.max_batch_bytes``; checked
on the compressed bytes before decompressing, and again on the decompressed bodies) or a
message the store refuses by size; TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) for transactional requests or
batches (transactions are not offered); 45/47 from the idempotence check. acks other
than -1, 0, 1 → INVALID_REQUIRED_ACKS (21) everywhere. TOPIC_AUTHORIZATION_FAILED (29)
for every partition of a topic the connection may not WRITE (checked before the topic's
existence, as Kafka does).
"""

from __future__ import annotations

import asyncio
from operator import itemgetter
from typing import Any

from mqcore.access.model import Operation, ResourceType
from mqcore.broker.broker import Broker
from mqcore.broker.placement import ToQueue
from mqcore.broker.types import SendResult
from mqcore.errors import MessageIllegalError, MQError, NotFoundError, ValidationError
from mqcore.format.msgid import decode_offset_msg_id
from mqcore.message import Message
from mqcore.store.put.plain_batch import PlainColumns

from .. import mapping
from ..arrivals import QueueRef
from ..batch_cache import BatchCache, CachedBatch
from ..compression import decompressed_limit
from ..errors import ErrorCode, error_code_for
from ..idempotence import ProducerStates
from ..plain_records import plain_messages
from ..record_codec import Record, decode_records_section
from ..records import (
    ATTR_COMPRESSION_MASK,
    BatchHeader,
    decode_batch,
    patch_base_offset,
    records_section,
    split_batches,
    verify_crc,
)
from .authz import CLUSTER, may_on_some, store_topic_resource
from .context import Call, KafkaContext, Later
from .topics import kafka_topic

PlainBatch = list[Message] | PlainColumns
_OFFSET_DELTA = itemgetter(0)  # Record.offset_delta
_VISIBLE_AT = "_visible_at"  # private key: where a stored batch ends, popped before replying
MAX_VISIBILITY_WAIT_MS = 5_000
# Dispatches are heard in this process (arrivals.py); the re-check only matters when
# another process runs reput.
VISIBILITY_RECHECK_S = 0.005

_SEND_ERRORS: dict[type[BaseException], ErrorCode] = {
    NotFoundError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    MessageIllegalError: ErrorCode.MESSAGE_TOO_LARGE,
    ValidationError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,  # queue_id out of range
}


class _Refused(Exception):
    def __init__(self, code: ErrorCode) -> None:
        self.code = code


def _partition_reply(code: int, base_offset: int = -1, log_start: int = -1) -> dict[str, Any]:
    return {
        "error_code": int(code),
        "base_offset": base_offset,
        "log_append_time_ms": -1,
        "log_start_offset": log_start,
    }


def _decode(
    records: bytes, topic: str, partition: int, call: Call, limit: int
) -> tuple[BatchHeader, PlainBatch | None, list[Record]]:
    """The batch's header and either its plain messages (``plain_records.py``, the fast
    path) or its records (general path: headers, tombstones, binary keys, and every
    malformed batch, whose error this raises as ``decode_batch`` does). Records sections
    decompress to at most ``limit`` bytes."""
    raws = split_batches(records)
    if len(raws) != 1 or partition < 0:  # decode_batch says what is wrong with them
        batch = decode_batch(records, limit=limit)
        return batch.header, None, batch.records
    raw = raws[0]
    verify_crc(raw)
    header = raw.header
    section = records_section(raw, limit)
    messages = plain_messages(
        section, header.records_count, header.base_timestamp, topic, call.peer
    )
    if messages is not None:
        return header, messages, []
    return (
        header,
        None,
        decode_records_section(section, header.records_count, header.base_timestamp),
    )


def _store_partition(
    broker: Broker,
    producers: ProducerStates,
    cache: BatchCache,
    topic: str,
    partition: int,
    records: bytes | None,
    call: Call,
) -> dict[str, Any]:
    """Decode, check and store one partition's batch. Runs in a worker thread."""
    if records is None:
        return _partition_reply(ErrorCode.INVALID_RECORD)
    if len(records) > broker.config.max_batch_bytes:  # checked before any decompression
        return _partition_reply(ErrorCode.MESSAGE_TOO_LARGE)
    try:
        limit = decompressed_limit(broker.config.max_batch_bytes)
        header, plain, decoded = _decode(records, topic, partition, call, limit)
        if header.is_transactional or header.is_control:
            raise _Refused(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if plain is not None:  # offset deltas 0, 1, ..., n-1 checked while decoding
            count = len(plain)
            if header.last_offset_delta != count - 1:
                raise _Refused(ErrorCode.INVALID_RECORD)
        else:
            count = len(decoded)
            if count == 0 or header.last_offset_delta != count - 1:
                raise _Refused(ErrorCode.INVALID_RECORD)
            # Offset deltas 0, 1, ..., n-1: one list comparison, not a Python loop.
            if list(map(_OFFSET_DELTA, decoded)) != list(range(count)):
                raise _Refused(ErrorCode.INVALID_RECORD)
        if header.producer_id >= 0:
            key = (header.producer_id, topic, partition)
            with producers.lock(header.producer_id):
                code, duplicate_at = producers.check(
                    key, header.producer_epoch, header.base_sequence, count
                )
                if code != ErrorCode.NONE:
                    raise _Refused(code)
                if duplicate_at is not None:
                    return _partition_reply(ErrorCode.NONE, duplicate_at, -1)
                pending = producers.begin(
                    key,
                    header.producer_epoch,
                    header.base_sequence,
                    count,
                    _end_bodies(plain, decoded),
                    call.peer,
                )
                try:
                    first = _send(broker, topic, partition, plain, decoded, call)
                except BaseException:
                    producers.abandon(pending)
                    raise
                base = first.queue_offset
                producers.record(pending, base, decode_offset_msg_id(first.offset_msg_id)[1])
        else:
            first = _send(broker, topic, partition, plain, decoded, call)
            base = first.queue_offset
        if cache.max_bytes > 0 and not header.attributes & ~ATTR_COMPRESSION_MASK:
            batch_bytes = patch_base_offset(records, base, 0)
            entry = CachedBatch(base, base + count, batch_bytes, first.msg_id, header.compression)
            cache.put(topic, partition, entry)
        reply = _partition_reply(ErrorCode.NONE, base, broker.reader.min_offset(topic, partition))
        reply[_VISIBLE_AT] = (topic, partition, base + count - 1)
        return reply
    except _Refused as refused:
        return _partition_reply(refused.code)
    except MQError as exc:
        return _partition_reply(error_code_for(exc, _SEND_ERRORS))


def _end_bodies(plain: PlainBatch | None, decoded: list[Record]) -> tuple[bytes, bytes]:
    """The first and last record's bodies as the store will hold them (what the
    idempotence journal fingerprints a batch by)."""
    if isinstance(plain, PlainColumns):
        return plain.bodies[0], plain.bodies[-1]
    if plain is not None:
        return plain[0].body, plain[-1].body
    return mapping.stored_body(decoded[0].value), mapping.stored_body(decoded[-1].value)


def _send(
    broker: Broker,
    topic: str,
    partition: int,
    plain: PlainBatch | None,
    decoded: list[Record],
    call: Call,
) -> SendResult:
    """Store the batch (one put); the first message's SendResult."""
    if plain is not None:
        return broker.send(topic, plain, ToQueue(partition))[0]
    to_message = mapping.record_to_message
    messages = [to_message(r, partition) for r in decoded]
    return broker.send(topic, messages, ToQueue(partition), born_host=call.peer)[0]


def _store_all(ctx: KafkaContext, call: Call, error: ErrorCode | None) -> list[dict[str, Any]]:
    broker = ctx.broker
    responses = []
    for topic_data in call.request["topic_data"]:
        name = topic_data["name"]
        topic_error = error
        if topic_error is None and mapping.kafka_topic_error(name) is not None:
            topic_error = ErrorCode.INVALID_TOPIC_EXCEPTION
        store_topic = mapping.to_store_topic(name)
        # Authorized before existence, as Kafka does (a refused client learns nothing of
        # which topics exist); one cached lookup per topic of the request.
        if topic_error is None and not call.check(
            ctx, Operation.WRITE, store_topic_resource(store_topic)
        ):
            topic_error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if topic_error is None and kafka_topic(broker, name) is None:
            topic_error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        partitions = []
        for part in topic_data["partition_data"]:
            if topic_error is not None:
                reply = _partition_reply(topic_error)
            else:
                reply = _store_partition(
                    broker,
                    ctx.producers,
                    ctx.batch_cache,
                    store_topic,
                    part["index"],
                    part["records"],
                    call,
                )
            reply["index"] = part["index"]
            partitions.append(reply)
        responses.append({"name": name, "partition_responses": partitions})
    return responses


async def produce(ctx: KafkaContext, call: Call) -> Later | None:
    """Store every partition's batch (in request order: the stores of one connection run
    one after the other), then answer once the records are readable; None (no response
    at all) for acks=0."""
    acks = call.request["acks"]
    error: ErrorCode | None = None
    if acks not in (-1, 0, 1):
        error = ErrorCode.INVALID_REQUIRED_ACKS
    elif call.request["transactional_id"] is not None:
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    responses = await asyncio.to_thread(_store_all, ctx, call, error)
    refs = [
        reply.pop(_VISIBLE_AT)
        for topic in responses
        for reply in topic["partition_responses"]
        if _VISIBLE_AT in reply
    ]
    if acks == 0:
        return None
    timeout_ms = min(max(call.request["timeout_ms"], 0), MAX_VISIBILITY_WAIT_MS)
    return Later(
        _when_visible(ctx, refs, timeout_ms, {"responses": responses, "throttle_time_ms": 0})
    )


async def _when_visible(
    ctx: KafkaContext, refs: list[QueueRef], timeout_ms: int, response: dict[str, Any]
) -> dict[str, Any]:
    """Wait until reput has dispatched every stored batch (so a consumer, ListOffsets or
    the REST API asked after the acknowledgement sees the records, as with Kafka), at most
    ``timeout_ms``; the records are stored either way."""
    if refs:
        await ctx.arrivals.wait(refs, timeout_ms / 1000, VISIBILITY_RECHECK_S, every=True)
    return response


async def init_producer_id(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """A new producer id (epoch 0); transactional ids are refused (53). An idempotent
    producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679), else
    CLUSTER_AUTHORIZATION_FAILED (31)."""
    refused: ErrorCode | None = None
    if call.request["transactional_id"] is not None:
        refused = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not call.check(ctx, Operation.IDEMPOTENT_WRITE, CLUSTER) and not may_on_some(
        ctx.access.authorizer(), call.subject, Operation.WRITE, ResourceType.TOPIC
    ):
        refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if refused is not None:
        return {
            "throttle_time_ms": 0,
            "error_code": int(refused),
            "producer_id": -1,
            "producer_epoch": -1,
        }
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "producer_id": ctx.producers.new_producer_id(),
        "producer_epoch": 0,
    }
