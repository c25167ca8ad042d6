"""Consumer retry and dead letters (spec 9, ``SendMessageProcessor.consumerSendMsgBack``).

A consumer that fails a message sends it back (:func:`send_back`). The broker stores a new
record with ``reconsumeTimes + 1``, every original property (so the client-visible msgId,
``UNIQ_KEY``, stays the same), ``RETRY_TOPIC`` = the original topic (if not already set),
``ORIGIN_MESSAGE_ID`` = the first delivery's offsetMsgId (if not already set), ``WAIT=false``:

* while ``reconsumeTimes < retryMaxTimes`` and the requested level is >= 0: for
  ``%RETRY%<group>`` (``retryQueueNums`` queues, perm 6, created on demand), delayed by the
  requested level, or by level ``3 + reconsumeTimes`` when the consumer asked for 0 (so the
  first retry waits 10 s). It goes through the delay hook, so it sits in
  ``SCHEDULE_TOPIC_XXXX`` until due, then appears in the retry topic;
* otherwise: to ``%DLQ%<group>`` (1 queue, perm 6, created on demand), undelayed, with
  ``DLQ_ORIGIN_TOPIC`` / ``DLQ_ORIGIN_MESSAGE_ID`` naming where it came from.

A group with ``retryQueueNums`` 0 drops failed messages (RocketMQ does the same).

:func:`resend_from_dlq` stores a DLQ record again in its original topic as a fresh message
(reconsume count 0, same UNIQ_KEY), for the console's "resend" button.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mqcore.broker import copies
from mqcore.broker.admin import require_group
from mqcore.broker.errors import NoPermissionError
from mqcore.broker.reader import StoreReader
from mqcore.broker.sending import Placed, QueueSelector, to_schedule
from mqcore.broker.types import SendBackAction, SendBackResult, SendResult
from mqcore.errors import NotFoundError, ValidationError
from mqcore.format.layout import HOST_V6_FLAGS
from mqcore.format.properties import (
    PROPERTY_DELAY,
    PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
    PROPERTY_DLQ_ORIGIN_TOPIC,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_WAIT,
)
from mqcore.message import Message, MessageExt
from mqcore.metadata import Metadata, TopicConfig
from mqcore.metadata.topics import dlq_topic_name, is_writeable, retry_topic_name

FIRST_RETRY_LEVEL = 3  # "3 + reconsumeTimes": level 3 = 10 s by default


def _require_writable(config: TopicConfig, field: str) -> None:
    if not is_writeable(config.perm):
        raise NoPermissionError(
            field,
            "topic_not_writable",
            f"topic {config.topic_name!r} does not accept messages (perm {config.perm})",
        )


def delivered_copy(store: StoreReader, group: str, msg_id: str) -> MessageExt:
    """The record a consumer of ``group`` was handed: the one an offsetMsgId names, or for a
    UNIQ_KEY the newest copy in ``%RETRY%<group>``, else the newest in its home topic.

    Raises:
        NotFoundError: field ``msg_id``, rule ``not_found``.
    """
    found = copies.by_offset_msg_id(store, msg_id)
    if found is None:
        key = msg_id.strip().upper()
        found = copies.newest(copies.copies(store, retry_topic_name(group), key))
        if found is None:
            any_copy = store.view_by_id(key)
            if any_copy is not None:
                home = copies.copies(store, copies.home_topic(any_copy), key)
                found = copies.newest(home) or any_copy
    if found is None:
        raise NotFoundError("msg_id", "not_found", f"no message with id {msg_id!r}")
    return found


Deliver = Callable[[Sequence[Placed]], Sequence[SendResult]]
"""Stores placed messages: the broker's internal delivery (``Broker.deliver_internal``)."""


def send_back(
    reader: StoreReader,
    deliver: Deliver,
    metadata: Metadata,
    selector: QueueSelector,
    group: str,
    msg_id: str,
    delay_level: int,
    *,
    max_reconsume_times: int | None,
    max_delay_level: int,
) -> SendBackResult:
    """See the module docstring. ``reader`` finds the message (the tiered store finds
    messages whose local files are gone); the copy is stored through ``deliver``.

    Raises:
        NotFoundError: unknown group or message.
        NoPermissionError: the retry or DLQ topic is not writable.
        ValidationError: ``max_reconsume_times`` negative.
    """
    group_config = require_group(metadata, group)
    message = delivered_copy(reader, group, msg_id)
    if max_reconsume_times is not None and max_reconsume_times < 0:
        raise ValidationError("max_reconsume_times", "range", "max_reconsume_times: must be >= 0")
    limit = group_config.retry_max_times if max_reconsume_times is None else max_reconsume_times
    reconsume = message.reconsume_times
    if group_config.retry_queue_nums <= 0:
        return SendBackResult(SendBackAction.DROPPED, reconsume + 1, 0, None)
    props = _carried_properties(message)
    if reconsume >= limit or delay_level < 0:
        target = metadata.topics.create_dlq_topic(group)
        _require_writable(target, "dlq_topic")
        props[PROPERTY_DLQ_ORIGIN_TOPIC] = props[PROPERTY_RETRY_TOPIC]
        props[PROPERTY_DLQ_ORIGIN_MESSAGE_ID] = message.msg_id
        action, level, queue_id = SendBackAction.DLQ, 0, 0
    else:
        target = metadata.topics.create_retry_topic(group, group_config.retry_queue_nums)
        _require_writable(target, "retry_topic")
        level = delay_level if delay_level > 0 else FIRST_RETRY_LEVEL + reconsume
        level = min(level, max_delay_level)
        action, queue_id = SendBackAction.RETRY, selector.select(target, None, None)
    copy = _copy(message, target.topic_name, props, reconsume + 1, level)
    placed = to_schedule(copy, queue_id, max_delay_level)
    (result,) = deliver([placed])
    return SendBackResult(action, reconsume + 1, level, result)


def _carried_properties(message: MessageExt) -> dict[str, str]:
    props = dict(message.properties)
    for name in (
        PROPERTY_DELAY,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QID,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_TIMER_DELAY_SEC,
    ):
        props.pop(name, None)
    props.setdefault(PROPERTY_RETRY_TOPIC, message.topic)
    props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, message.offset_msg_id)
    props[PROPERTY_WAIT] = "false"
    return props


def _copy(
    message: MessageExt, topic: str, props: dict[str, str], reconsume_times: int, level: int
) -> Message:
    return Message(
        topic,
        message.body,
        properties=props,
        flag=message.flag,
        born_timestamp=message.born_timestamp,
        born_host=message.born_host,
        reconsume_times=reconsume_times,
        sys_flag=message.sys_flag & ~HOST_V6_FLAGS,
        delay_level=level,
    )


def resend_from_dlq(
    reader: StoreReader,
    deliver: Deliver,
    metadata: Metadata,
    selector: QueueSelector,
    group: str,
    msg_id: str,
) -> SendResult:
    """Store the DLQ record ``msg_id`` of ``group`` (found through ``reader``) again in its
    original topic, through ``deliver``.

    Raises:
        NotFoundError: no DLQ for the group, the message is not in it, or its original
            topic no longer exists.
        NoPermissionError: the original topic is not writable.
    """
    dlq = dlq_topic_name(group)
    if metadata.topics.get(dlq) is None:
        raise NotFoundError("group", "no_dlq", f"group {group!r} has no dead-letter topic")
    message = copies.find(reader, msg_id, dlq)
    if message is None:
        raise NotFoundError("msg_id", "not_in_dlq", f"message {msg_id!r} is not in {dlq!r}")
    props = dict(message.properties)
    original = props.get(PROPERTY_DLQ_ORIGIN_TOPIC) or props.get(PROPERTY_RETRY_TOPIC)
    target = metadata.topics.get(original) if original else None
    if target is None:
        raise NotFoundError(
            "topic", "not_found", f"the original topic {original!r} of {msg_id!r} does not exist"
        )
    _require_writable(target, "topic")
    for name in (
        PROPERTY_RETRY_TOPIC,
        PROPERTY_DLQ_ORIGIN_TOPIC,
        PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
        PROPERTY_WAIT,
    ):
        props.pop(name, None)
    copy = _copy(message, target.topic_name, props, 0, 0)
    queue_id = selector.select(target, None, None)
    (result,) = deliver([Placed(copy, queue_id, copy.topic, queue_id, False)])
    return result
