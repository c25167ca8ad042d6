"""Plain sends: batches of messages without user properties or delay level, checked and
stored without an ``OutgoingMessage``, ``Placed`` or ``PutResult`` object per message.

``sending.py`` has the rules (spec 11) and :func:`~mqcore.broker.sending.place_messages`,
the general path. A front end that builds plain store messages itself (or, for the Kafka
listener, ``PlainColumns``) sends them here with the same rules, order and errors: one
queue's batch through :func:`place_plain_batch` and :func:`store_plain_batch`
(``Broker.send_plain``), a batch without explicit queues or sharding keys round robin
through :func:`place_plain_round_robin` and :func:`store_plain_round_robin`
(``Broker.send_plain_round_robin``). ``tests/mqcore/broker/test_send_plain*.py`` and
``test_send_round_robin.py`` compare them with the general path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mqcore.broker.sending import (
    SAFE_KEYS_CHARS,
    QueueSelector,
    SendResultBuilder,
    check_queue_id,
    check_writable,
    column_send_results,
    message_field,
    placed_for,
    put_send_results,
    renamed_error,
    send_result_of,
    send_status_of,
    surely_fits,
)
from mqcore.broker.types import SendResult
from mqcore.errors import MessageIllegalError, ValidationError
from mqcore.format.msgid import UniqKeyGenerator
from mqcore.format.properties import encode_message_properties
from mqcore.message import Message
from mqcore.metadata import TopicConfig
from mqcore.store.put.plain_batch import PlainColumns
from mqcore.store.results import BatchPutResults, PutResult, PutStatus
from mqcore.store.store import MessageStore
from mqcore.validation import validate_body, validate_properties_size


def place_plain_batch(
    config: TopicConfig,
    queue_id: int,
    messages: Sequence[Message] | PlainColumns,
    *,
    uniq: UniqKeyGenerator,
    max_message_size: int,
    max_batch_bytes: int,
) -> None:
    """Validate a batch of plain messages for one queue: :func:`place_messages`'s rules, in
    its order and with its errors, for what a front end that builds store messages itself
    sends (the Kafka listener's produce of records without headers: one queue per batch).

    Plain means: ``topic`` is the topic's name, no properties, no delay level (the store
    gives them ``UNIQ_KEY`` and encodes them in its plain-batch loop). Nothing is copied:
    the messages go to :func:`store_plain_batch` as they are. No ``Placed`` and no
    ``OutgoingMessage`` per message: on a Kafka batch of thousands of records those
    conversions cost more than the store's own encoding. ``messages`` may be columns
    (``PlainColumns``): checked as ``to_messages()`` would be, the messages built only
    for a batch that breaks a rule (to raise its error).

    Raises:
        ValidationError / MessageIllegalError / NoPermissionError: as ``place_messages``.
        ValueError: a message is not plain (a caller's bug, nothing is stored).
    """
    batch = len(messages) > 1
    check_queue_id(config, queue_id, message_field("queue_id", 0, batch))
    check_writable(config)
    if not messages:
        raise ValidationError("messages", "empty", "messages: send at least one message")
    if isinstance(messages, PlainColumns):
        if _surely_fine(config.topic_name, messages, max_message_size, max_batch_bytes):
            return
        messages = messages.to_messages()
    _check_plain(config.topic_name, messages, uniq, max_message_size, max_batch_bytes)


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


def place_plain_round_robin(
    config: TopicConfig,
    messages: Sequence[Message],
    *,
    selector: QueueSelector,
    uniq: UniqKeyGenerator,
    max_message_size: int,
    max_batch_bytes: int,
) -> int:
    """Validate plain messages (as :func:`place_plain_batch`) that go round robin: no
    explicit queue and no sharding key (the REST API's usual batch). :func:`place_messages`'s
    rules, order and errors for the same messages sent as ``OutgoingMessage``; their
    round-robin positions are taken where it takes them (before the per-message checks).

    Returns:
        The first position: message ``i`` goes to queue ``(first + i) % writeQueueNums``
        (:func:`store_plain_round_robin`).

    Raises:
        As :func:`place_plain_batch`.
    """
    check_writable(config)
    if not messages:
        raise ValidationError("messages", "empty", "messages: send at least one message")
    topic = config.topic_name
    first = selector.reserve(topic, len(messages))
    _check_plain(topic, messages, uniq, max_message_size, max_batch_bytes)
    return first


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


def store_plain_batch(
    store: MessageStore,
    messages: Sequence[Message] | PlainColumns,
    queue_id: int,
    broker_name: str,
) -> SendResult:
    """Put a batch checked by :func:`place_plain_batch` with one put (consecutive offsets
    from the first message's). Raises on a refused put as :func:`store_placed` does.
    Columns go to ``put_plain_columns``, the store's ``put_batch`` for them.

    Returns:
        The first message's SendResult: the others follow it, one queue offset each.
    """
    if isinstance(messages, PlainColumns):
        puts = store.put_plain_columns(messages, queue_id)
    else:
        puts = store.put_batch(messages, queue_id)
    if isinstance(puts, BatchPutResults):  # one status for the batch; one offsetMsgId made
        return _first_result(puts, queue_id, broker_name)
    if isinstance(messages, PlainColumns):  # put by the general path: one result a message
        messages = messages.to_messages()
    result = send_result_of(placed_for(messages[0], queue_id), puts[0], broker_name)
    for message, put in zip(messages, puts, strict=True):  # one put's statuses agree: check
        if put.status is not PutStatus.PUT_OK and put.status is not PutStatus.FLUSH_DISK_TIMEOUT:
            send_result_of(placed_for(message, queue_id), put, broker_name)  # raises
    return result


def _first_result(puts: BatchPutResults, queue_id: int, broker_name: str) -> SendResult:
    """The SendResult of a plain batch's first message (one status for the batch; one
    offsetMsgId made)."""
    r: Any = SendResultBuilder()
    r.status = send_status_of(puts.status, puts)
    r.msg_id = puts.msg_ids[0]
    r.offset_msg_id = puts.offset_msg_id_at(0)
    r.topic = puts.topic
    r.queue_id = queue_id
    r.queue_offset = puts.queue_offsets[0]
    r.broker_name = broker_name
    r.store_timestamp = puts.store_timestamp
    r.delayed = False
    r.__class__ = SendResult
    return r  # type: ignore[no-any-return]


def store_plain_round_robin(
    store: MessageStore,
    messages: Sequence[Message],
    first: int,
    write_queue_nums: int,
    broker_name: str,
) -> list[SendResult]:
    """Put a batch checked by :func:`place_plain_round_robin` from round-robin position
    ``first``: what :func:`store_placed` does with the same messages placed by
    :func:`place_messages` (one put per queue, queues in the order they first appear, the
    same offsets and CommitLog order), without grouping message by message: the messages
    of the ``j``-th queue are ``messages[j::writable]``. Raises on a refused put.

    Returns:
        One SendResult per message, in the order given.
    """
    writable = max(1, write_queue_nums)
    results: list[Any] = [None] * len(messages)
    for j in range(min(len(messages), writable)):
        queue_id = (first + j) % writable
        group = messages[j::writable]
        puts = store.put_batch(group, queue_id)
        results[j::writable] = _plain_results(group, puts, queue_id, broker_name)
    return results


def _plain_results(
    messages: Sequence[Message], puts: Sequence[PutResult], queue_id: int, broker_name: str
) -> list[SendResult]:
    """The SendResults of one put of plain messages (stored where they belong)."""
    if isinstance(puts, BatchPutResults):
        return column_send_results(puts, broker_name)
    # Not the plain path (a topic's first put, a refused put): as store_placed reports it.
    return put_send_results([placed_for(m, queue_id) for m in messages], puts, broker_name)
