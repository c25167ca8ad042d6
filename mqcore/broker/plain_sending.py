"""The send fast path: store messages a front end built itself, without an
``OutgoingMessage``, ``Placed`` or ``PutResult`` object per message.

A *plain* message has no user properties and no delay level; the store gives it its
``UNIQ_KEY`` and encodes a batch of them in its batch loop. A front end that decodes its input
straight into plain store messages (:func:`mqcore.message.plain_message`, or for the Kafka
listener's large batches ``PlainColumns``) hands them to ``Broker.send``, which sends them
here (the one rule: a batch of store messages is plain and takes this path; a batch of
``OutgoingMessage`` takes :mod:`mqcore.broker.sending`, the reference path). The same rules
(spec 11), in the same order, with the same errors; the same queues, offsets and CommitLog
order as the reference path gives the same messages as ``OutgoingMessage`` without
``queue_id`` or ``sharding_key`` (``tests/mqcore/broker/test_plain_sending.py`` compares the
two). Why a second path: on a batch of thousands, the per-message conversions of the
reference path cost more than the store's own encoding.

Placement: :class:`~mqcore.broker.placement.ToQueue` puts the whole batch with one put;
:data:`~mqcore.broker.placement.BY_MESSAGE` spreads it round robin (plain messages name no
queue and no sharding key), one put per queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mqcore.broker.placement import Placement, ToQueue
from mqcore.broker.sending import (
    SAFE_KEYS_CHARS,
    ColumnSendResults,
    QueueSelector,
    check_queue_id,
    check_writable,
    message_field,
    placed_for,
    put_send_results,
    renamed_error,
    surely_fits,
)
from mqcore.broker.types import SendResult
from mqcore.errors import MessageIllegalError, ValidationError
from mqcore.format.msgid import UniqKeyGenerator
from mqcore.format.properties import encode_message_properties
from mqcore.message import Message
from mqcore.metadata import TopicConfig
from mqcore.store.put.plain_batch import PlainColumns
from mqcore.store.results import BatchPutResults, PutResult
from mqcore.store.store import MessageStore
from mqcore.validation import validate_body, validate_properties_size

PlainBatch = Sequence[Message] | PlainColumns
"""Plain store messages a front end built: a list, or columns (``to_messages()`` are the
messages)."""

QueueGroups = list[tuple[int, slice]]
"""Where a plain batch goes: ``(queue_id, the slice of the batch stored there)`` per put, in
put order."""

_WHOLE = slice(None)


def is_plain_batch(messages: Sequence[Any] | PlainColumns) -> bool:
    """The rule that chooses the send path: a batch of store messages (or columns) is plain
    and takes this fast path; a batch of ``OutgoingMessage`` (or an empty one) the reference
    path. Every message of a plain batch is checked to be plain (ValueError otherwise)."""
    return isinstance(messages, PlainColumns) or (
        len(messages) > 0 and isinstance(messages[0], Message)
    )


def place_plain(
    config: TopicConfig,
    messages: PlainBatch,
    placement: Placement,
    *,
    selector: QueueSelector,
    uniq: UniqKeyGenerator,
    max_message_size: int,
    max_batch_bytes: int,
) -> QueueGroups:
    """Validate a plain batch with :func:`~mqcore.broker.sending.place_messages`'s rules, in
    its order and with its errors, and choose its queues: a :class:`ToQueue` batch goes to
    that queue whole; otherwise message ``i`` goes to the topic's round-robin position
    ``first + i`` (taken where the reference path takes it, before the per-message checks).

    Plain means: ``topic`` is the topic's name, no properties, no delay level. Nothing is
    copied: the messages go to :func:`store_plain` as they are. Columns are checked as
    ``to_messages()`` would be, by a few passes over the columns when they surely pass; the
    messages are only built for a batch that may break a rule.

    Raises:
        ValidationError / MessageIllegalError / NoPermissionError: as ``place_messages``.
        ValueError: a message is not plain (a caller's bug, nothing is stored).
    """
    topic = config.topic_name
    if isinstance(placement, ToQueue):
        queue_id = placement.queue_id
        check_queue_id(config, queue_id, message_field("queue_id", 0, len(messages) > 1))
        check_writable(config)
        if not messages:
            raise ValidationError("messages", "empty", "messages: send at least one message")
        if isinstance(messages, PlainColumns):
            if _surely_fine(topic, messages, max_message_size, max_batch_bytes):
                return [(queue_id, _WHOLE)]
            messages = messages.to_messages()
        _check_plain(topic, messages, uniq, max_message_size, max_batch_bytes)
        return [(queue_id, _WHOLE)]
    check_writable(config)
    if not messages:
        raise ValidationError("messages", "empty", "messages: send at least one message")
    first = selector.reserve(topic, len(messages))
    if isinstance(messages, PlainColumns):
        messages = messages.to_messages()
    _check_plain(topic, messages, uniq, max_message_size, max_batch_bytes)
    writable = max(1, config.write_queue_nums)
    return [
        ((first + j) % writable, slice(j, None, writable))
        for j in range(min(len(messages), writable))
    ]


def _surely_fine(
    topic: str, columns: PlainColumns, max_message_size: int, max_batch_bytes: int
) -> bool:
    """Whether :func:`_check_plain` surely passes ``columns.to_messages()``: a few C-level
    passes over the columns instead of a step per message."""
    lengths = columns.body_lengths()
    if columns.topic != topic or lengths is None:
        return False
    if not 0 < lengths.min() <= lengths.max() <= max_message_size:
        return False
    if int(lengths.sum()) > max_batch_bytes:
        return False
    keys = columns.keys
    if keys.count("") == len(keys):
        return True
    # surely_fits(None, key) for every key at once (~0.15 us a key less than a call each)
    try:
        text = "".join(keys)
    except TypeError:
        return False
    return (
        max(map(len, keys)) <= SAFE_KEYS_CHARS
        and text.isascii()
        and "\x01" not in text
        and "\x02" not in text
    )


def _check_plain(
    topic: str,
    messages: Sequence[Message],
    uniq: UniqKeyGenerator,
    max_message_size: int,
    max_batch_bytes: int,
) -> None:
    """:func:`place_messages`'s per-message rules (body, properties) and the batch's body
    bytes, for plain messages of ``topic``."""
    batch = len(messages) > 1
    id_placeholder = ""
    total = 0
    for i, m in enumerate(messages):
        if m.topic != topic or m.properties or m.delay_level:
            raise ValueError(f"messages[{i}] is not a plain message for topic {topic!r}")
        body = m.body
        if body is None or not 0 < len(body) <= max_message_size:
            try:
                validate_body(body, max_message_size)
            except ValidationError as exc:
                raise renamed_error(exc, message_field("body", i, batch)) from None
        total += len(body)
        if not surely_fits(m.tags, m.keys):
            if not id_placeholder:  # as long as the store's ids (see place_messages)
                id_placeholder = "0" * len(uniq.next_id())
            try:
                validate_properties_size(
                    encode_message_properties(m.tags, m.keys_value(), 0, id_placeholder)
                )
            except ValidationError as exc:
                raise renamed_error(exc, message_field("properties", i, batch)) from None
    if total > max_batch_bytes:
        raise MessageIllegalError(
            "messages",
            "max_batch_bytes",
            f"messages: a send may carry at most {max_batch_bytes} body bytes (got {total})",
        )


def store_plain(
    store: MessageStore, messages: PlainBatch, groups: QueueGroups, broker_name: str
) -> Sequence[SendResult]:
    """Put a batch checked by :func:`place_plain`, one put per group (consecutive offsets in
    each queue): what :func:`~mqcore.broker.sending.store_placed` does with the same messages
    placed by the reference path, without grouping message by message (a round-robin
    batch's ``j``-th queue holds ``messages[j::writeQueueNums]``). Raises on a refused put.

    Returns:
        One SendResult per message, in the order given. A one-put batch whose results came
        back as columns returns them as :class:`ColumnSendResults`, each made when read.
    """
    if len(groups) == 1:
        queue_id = groups[0][0]
        if isinstance(messages, PlainColumns):
            puts = store.put_plain_columns(messages, queue_id)
            if not isinstance(puts, BatchPutResults):
                messages = messages.to_messages()
        else:
            puts = store.put_batch(messages, queue_id)
        return _plain_results(messages, puts, queue_id, broker_name)  # type: ignore[arg-type]
    if isinstance(messages, PlainColumns):
        messages = messages.to_messages()
    results: list[Any] = [None] * len(messages)
    for queue_id, part in groups:
        group = messages[part]
        results[part] = _plain_results(
            group, store.put_batch(group, queue_id), queue_id, broker_name
        )
    return results


def _plain_results(
    messages: Sequence[Message], puts: Sequence[PutResult], queue_id: int, broker_name: str
) -> Sequence[SendResult]:
    """The SendResults of one put of plain messages (stored where they belong)."""
    if isinstance(puts, BatchPutResults):
        return ColumnSendResults(puts, broker_name)
    # Not the plain path (a topic's first put, a refused put): as store_placed reports it.
    return put_send_results([placed_for(m, queue_id) for m in messages], puts, broker_name)
