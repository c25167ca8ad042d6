"""Finding a message and its copies.

One client message id (``UNIQ_KEY``) can name several records: a delayed message's parked
record in ``SCHEDULE_TOPIC_XXXX`` and its delivered copy, a failed message's copies in
``%RETRY%<group>`` (each first parked for its delay), its copy in ``%DLQ%<group>``, and a copy
resent from the DLQ. Every copy keeps the UNIQ_KEY (spec 9), and the index holds it, so the
copies of a topic are one key query away.

The **home topic** of a record is the topic its producer sent the original to:

==============================  ==============================================
record topic                    home topic
==============================  ==============================================
``SCHEDULE_TOPIC_XXXX``         ``RETRY_TOPIC`` if set, else ``REAL_TOPIC``
``%RETRY%g`` / ``%DLQ%g``       ``RETRY_TOPIC`` if set, else the record's topic
anything else                   the record's topic
==============================  ==============================================
"""

from __future__ import annotations

from mqcore.broker.reader import StoreReader
from mqcore.errors import ValidationError
from mqcore.format.msgid import decode_offset_msg_id
from mqcore.format.properties import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
)
from mqcore.message import MessageExt
from mqcore.metadata.topics import SCHEDULE_TOPIC
from mqcore.validation import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

MAX_COPIES = 64
_ALL_TIME = (0, 2**62)


def home_topic(message: MessageExt) -> str:
    """See the module docstring."""
    props = message.properties
    if message.topic == SCHEDULE_TOPIC:
        return props.get(PROPERTY_RETRY_TOPIC) or props.get(PROPERTY_REAL_TOPIC) or message.topic
    if message.topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        return props.get(PROPERTY_RETRY_TOPIC) or message.topic
    return message.topic


def by_offset_msg_id(store: StoreReader, msg_id: str) -> MessageExt | None:
    """The record an offsetMsgId names, or None when ``msg_id`` is not one."""
    text = msg_id.strip().upper()
    try:
        _host, phys = decode_offset_msg_id(text)
    except ValidationError:
        return None
    message = store.commit_log.message_at(phys)
    if message is None or message.offset_msg_id.upper() != text:
        return None
    return message


def copies(store: StoreReader, topic: str, uniq_key: str | None) -> list[MessageExt]:
    """Every record of ``topic`` carrying ``uniq_key``, oldest first (at most 64)."""
    if not uniq_key or not store.queues.queues(topic):
        return []
    found = store.query_by_key(topic, uniq_key, *_ALL_TIME, MAX_COPIES)
    return [m for m in found if m.properties.get(PROPERTY_UNIQ_KEY) == uniq_key]


def scheduled_copies(store: StoreReader, uniq_key: str | None, real_topic: str) -> list[MessageExt]:
    """Records parked in ``SCHEDULE_TOPIC_XXXX`` for ``real_topic``."""
    return [
        m
        for m in copies(store, SCHEDULE_TOPIC, uniq_key)
        if m.properties.get(PROPERTY_REAL_TOPIC) == real_topic
    ]


def newest(messages: list[MessageExt]) -> MessageExt | None:
    return max(messages, key=lambda m: m.phys_offset, default=None)


def find(store: StoreReader, msg_id: str, topic: str | None = None) -> MessageExt | None:
    """The record ``msg_id`` names: an offsetMsgId exactly, else the newest record carrying
    that UNIQ_KEY (in ``topic`` when given, else anywhere the store's index finds it)."""
    exact = by_offset_msg_id(store, msg_id)
    if exact is not None:
        return exact if topic is None or exact.topic == topic else None
    if topic is not None:
        return newest(copies(store, topic, msg_id.strip().upper()))
    return store.view_by_id(msg_id)
