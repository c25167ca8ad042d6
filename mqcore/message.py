"""Messages: what a producer hands in (:class:`Message`) and what the store holds (:class:`MessageExt`).

``Message`` mirrors RocketMQ's client ``Message``: a topic, a body, and properties, with tags,
keys and the delay level kept as typed fields and folded into the properties only when the
record is built (:meth:`Message.all_properties`).

``MessageExt`` is one decoded CommitLog record (spec 1.2): one attribute per record field, in
record order, plus derived read-only views (``tags``, ``keys``, ``msg_id``,
``offset_msg_id``) computed on access, so building one costs no more than its fields.

Two ids name a stored message (spec 2.3, 2.4):

* ``offset_msg_id``: store host + commit-log offset; unique per record.
* ``msg_id``: the producer's ``UNIQ_KEY`` when present (kept across retries), else the
  offset id. This is what clients call the message id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mqcore.format.msgid import HostAddress

__all__ = ["Message", "MessageExt"]

# This module imports nothing from ``mqcore.format`` or ``mqcore.store`` at load time: both
# import it (the record decoder builds MessageExt, results carry it), so a load-time import
# back would be circular. The names below equal the ``mqcore.format.properties`` constants
# (tests/mqcore/test_message.py checks), and the helpers are imported where they are used.
_KEYS = "KEYS"  # properties.PROPERTY_KEYS
_TAGS = "TAGS"  # properties.PROPERTY_TAGS
_DELAY = "DELAY"  # properties.PROPERTY_DELAY_TIME_LEVEL
_UNIQ_KEY = "UNIQ_KEY"  # properties.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_KEY_SEPARATOR = " "  # properties.KEY_SEPARATOR


@dataclass(slots=True)
class Message:
    """A message as a producer sends it.

    Attributes:
        topic: destination topic.
        body: payload bytes (possibly compressed, then ``sys_flag`` says so).
        tags: the single tag (``TAGS``), used for broker-side filtering; None or "" for none.
        keys: business keys (``KEYS``), indexed for lookup: a sequence of keys, or one string
            that may already hold several space-separated keys.
        properties: user properties; ``tags``, ``keys`` and ``delay_level`` win over the
            same names here when they are set.
        flag: opaque int for the application (record FLAG).
        born_timestamp: producer time in epoch ms; None lets the broker use its clock.
        born_host: producer address; None lets the broker use the connection's peer.
        reconsume_times: retry count (0 for a fresh message).
        sys_flag: record SYSFLAG bits the producer sets (compression, transaction type).
        delay_level: 1-based delay level (``DELAY``); 0 for none.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: Sequence[str] | str = ()
    properties: Mapping[str, str] | None = None
    flag: int = 0
    born_timestamp: int | None = None
    born_host: HostAddress | None = None
    reconsume_times: int = 0
    sys_flag: int = 0
    delay_level: int = 0

    def keys_value(self) -> str:
        """The ``KEYS`` property value: keys joined with a space ("" for none)."""
        keys = self.keys
        if isinstance(keys, str):
            return keys
        return _KEY_SEPARATOR.join(keys)

    def all_properties(self) -> dict[str, str]:
        """User properties merged with ``TAGS``, ``KEYS`` and ``DELAY`` from the fields.

        Returns:
            A new dict (the message is not changed). A field that is empty/zero leaves any
            value of the same name in ``properties`` alone.
        """
        merged = dict(self.properties) if self.properties else {}
        if self.tags:
            merged[_TAGS] = self.tags
        keys = self.keys_value()
        if keys:
            merged[_KEYS] = keys
        if self.delay_level > 0:
            merged[_DELAY] = str(self.delay_level)
        return merged


def plain_message(
    topic: str,
    body: bytes,
    keys: Sequence[str] | str,
    born_timestamp: int | None,
    born_host: HostAddress | None,
    tags: str | None = None,
    flag: int = 0,
) -> Message:
    """``Message(topic, body, tags=tags, keys=keys, flag=flag, born_timestamp=...,
    born_host=...)`` without the dataclass ``__init__``, whose keyword handling costs ~1 us
    a message: for the front ends that make one per record of a batch (the REST API's
    sends, the Kafka listener's produce, the broker's plain messages)."""
    m = _new_message(Message)
    m.topic = topic
    m.body = body
    m.tags = tags
    m.keys = keys
    m.properties = None
    m.flag = flag
    m.born_timestamp = born_timestamp
    m.born_host = born_host
    m.reconsume_times = 0
    m.sys_flag = 0
    m.delay_level = 0
    return m


_new_message = Message.__new__
# plain_message sets every field of a Message itself: one added there must be added here.
assert Message.__slots__ == (
    "topic", "body", "tags", "keys", "properties", "flag", "born_timestamp", "born_host",
    "reconsume_times", "sys_flag", "delay_level",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class MessageExt:
    """One CommitLog record, decoded (spec 1.2; field names follow the table in order).

    ``body`` is empty when the record was decoded without its body. ``properties`` is the
    decoded PROPERTIES field; treat it as read-only.
    """

    store_size: int
    magic_code: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    phys_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: HostAddress
    store_timestamp: int
    store_host: HostAddress
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        """The ``TAGS`` property, or None when absent or empty."""
        return self.properties.get(_TAGS) or None

    @property
    def keys(self) -> tuple[str, ...]:
        """The non-empty business keys of the ``KEYS`` property."""
        value = self.properties.get(_KEYS)
        return tuple(key for key in value.split(_KEY_SEPARATOR) if key) if value else ()

    @property
    def offset_msg_id(self) -> str:
        """Store host + commit-log offset as upper-case hex (spec 2.3)."""
        from mqcore.format.msgid import create_offset_msg_id

        return create_offset_msg_id(self.store_host, self.phys_offset)

    @property
    def msg_id(self) -> str:
        """The client-visible id: ``UNIQ_KEY`` if present, else :attr:`offset_msg_id`."""
        return self.properties.get(_UNIQ_KEY) or self.offset_msg_id

    def user_properties(self) -> dict[str, str]:
        """The properties minus the reserved system ones (``TAGS``, ``UNIQ_KEY``, ...)."""
        from mqcore.format.properties import is_system_property

        return {
            name: value for name, value in self.properties.items() if not is_system_property(name)
        }
