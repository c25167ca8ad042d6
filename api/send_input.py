"""The send body without DRF for the well-formed case: what the REST send path runs first.

DRF's ``SendSerializer`` validates a 1000-message batch field object by field object (deep
copies of the fields, one ``run_validation`` per value): about as much time as storing the
batch. :func:`plain_messages` checks the same rules in one loop over the JSON, but only
*accepts*: for any body that is not plainly valid (a missing or unknown field, a wrong type,
a value DRF would trim, coerce or refuse, a bad base64 string ...) it returns None, and the
view runs the serializer, whose errors (every broken rule, ``field`` and ``rule`` named) are
what the client gets. So a client never sees an error from this module, and every message it
accepts is the one the serializer would have produced (``tests/api/test_send_input.py``
compares the two on generated bodies).

The loop is the per-message cost of a batch send above the store, so the usual message
(``{"body": "..."}``, maybe with ``"keys"``) takes a short way through it, and the keys of
the whole batch are checked together, by a few scans of their joined text, after it. Keys
are handed on as one space-separated string (``OutgoingMessage.keys`` allows it, and the
serializer's :func:`~shared.serializers.messages.message_from` does the same): the ``KEYS``
property the store writes, which the broker then needs neither to join nor to measure.

The usual batch itself (every message a text body, maybe with keys) does not even need
OutgoingMessages: :func:`round_robin_messages` makes the store messages the broker would make
of them, for ``Broker.send``'s fast path (``tests/api/test_send_round_robin.py``
compares the two); it accepts a subset of what :func:`plain_messages` accepts.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from mqcore.broker.types import OutgoingMessage
from mqcore.format.msgid import HostAddress
from mqcore.kafka_properties import is_reserved_property
from mqcore.message import Message, plain_message
from shared.serializers.common import INT32_MAX

#: The fields of ``MessageInSerializer``; any other key makes the body "not plain".
FIELDS = frozenset(
    {
        "body",
        "body_encoding",
        "keys",
        "tag",
        "properties",
        "queue_id",
        "sharding_key",
        "delay_level",
    }
)
_MAX_KEYS = 64  # KeysField max_length
_MAX_TEXT = 1024  # max_length of a key, the tag and the sharding key
_STR = frozenset({str})


class _OutgoingBuilder:
    """The slots of the frozen :class:`OutgoingMessage`, assignable: filled, then its
    ``__class__`` set (identical layouts), it is an ordinary OutgoingMessage. The dataclass's
    own ``__init__`` (nine ``object.__setattr__`` calls) cost ~2 us a message, half of this
    module's time (``mqcore.store.put.plain_batch`` does the same for PutResult)."""

    __slots__ = OutgoingMessage.__slots__


# Every slot is set in plain_messages: a field added to OutgoingMessage must be added there too.
assert set(_OutgoingBuilder.__slots__) == {
    "body", "tag", "keys", "properties", "queue_id", "sharding_key", "delay_level", "flag",
    "born_timestamp",
}  # fmt: skip


def plain_messages(data: Any, max_messages: int) -> list[OutgoingMessage] | None:
    """The messages of ``{"messages": [...]}``, or None if the serializer must decide."""
    items = _message_items(data, max_messages)
    if items is None:
        return None
    out: list[OutgoingMessage] = []
    append = out.append
    batch_keys: list[Any] = []  # every key of the batch, checked by _keys_plain at the end
    add_keys = batch_keys.extend
    fields = FIELDS
    for item in items:
        if item.__class__ is not dict or not fields.issuperset(item):
            return None
        body = item.get("body")
        size = len(item)
        m: Any = _OutgoingBuilder()
        if size == 1 or (size == 2 and "keys" in item):
            # The usual message: a text body and maybe keys; every other field absent.
            if body.__class__ is not str or not body:
                return None
            try:
                m.body = body.encode("utf-8")
            except UnicodeEncodeError:
                return None
            m.tag = None
            m.properties = {}
            m.queue_id = None
            m.sharding_key = None
            m.delay_level = 0
        elif not _other_fields(item, m):
            return None
        keys: Any = item.get("keys", ())
        if keys.__class__ is list:
            if len(keys) > _MAX_KEYS:
                return None
            add_keys(keys)
            try:
                m.keys = " ".join(keys)  # checked below (a key with a space is no key)
            except TypeError:  # a key that is not text
                return None
        elif keys == ():
            m.keys = ""
        else:  # a string of keys, null, a number ...: the serializer decides
            return None
        m.flag = 0
        m.born_timestamp = None
        m.__class__ = OutgoingMessage
        append(m)
    if batch_keys and not _keys_plain(batch_keys):
        return None
    return out


def round_robin_messages(
    data: Any, max_messages: int, topic: str, born_host: HostAddress | None
) -> list[Message] | None:
    """The messages of a body whose every message is the usual one (a text body, maybe
    keys; every other field absent) as the store messages ``Broker.send`` would make of
    :func:`plain_messages`' OutgoingMessages, for ``Broker.send``'s fast path; None
    for any other body (then :func:`plain_messages` decides). The same checks as
    :func:`plain_messages`' usual path, and no OutgoingMessage for the broker to copy."""
    items = _message_items(data, max_messages)
    if items is None:
        return None
    out: list[Message] = []
    append = out.append
    batch_keys: list[Any] = []  # every key of the batch, checked by _keys_plain at the end
    add_keys = batch_keys.extend
    new_message = plain_message
    for item in items:
        if item.__class__ is not dict:
            return None
        size = len(item)
        if size == 1:
            keys = ""
        elif size == 2:
            got: Any = item.get("keys", ())
            if got.__class__ is not list or len(got) > _MAX_KEYS:
                return None
            add_keys(got)
            try:
                keys = " ".join(got)  # checked below (a key with a space is no key)
            except TypeError:  # a key that is not text
                return None
        else:
            return None
        body = item.get("body")  # absent when the other field is not "body"
        if body.__class__ is not str or not body:
            return None
        try:
            encoded = body.encode("utf-8")
        except UnicodeEncodeError:
            return None
        append(new_message(topic, encoded, keys, None, born_host))
    if batch_keys and not _keys_plain(batch_keys):
        return None
    return out


def _message_items(data: Any, max_messages: int) -> list[Any] | None:
    """The list of ``{"messages": [...]}`` when that is the whole body and it holds 1 to
    ``max_messages`` items; else None (the serializer decides)."""
    if data.__class__ is not dict or len(data) != 1:
        return None
    items = data.get("messages")
    if items.__class__ is not list or not 0 < len(items) <= max_messages:
        return None
    return items


def _keys_plain(keys: list[Any]) -> bool:
    """Whether every key is text the serializer keeps as it is: a non-empty ``str`` with no
    whitespace (DRF strips it, or refuses a blank; the KEYS property separates keys with
    spaces), at most ``_MAX_TEXT`` long, as :func:`_text` says. Checked on all the keys of a
    batch at once: joined by spaces, they split back into themselves exactly when none is
    empty or holds whitespace (``str.split``'s own notion of it, as a key at a time)."""
    if not _STR.issuperset(map(type, keys)):
        return False
    joined = " ".join(keys)
    return joined.split() == keys and max(map(len, keys)) <= _MAX_TEXT and _text(joined, 0)


def _other_fields(item: dict[str, Any], m: Any) -> bool:
    """Check and set every field but ``keys``, ``flag`` and ``born_timestamp`` (any message
    the usual path of :func:`plain_messages` does not take). False: not plain."""
    body = _body(item.get("body"), item.get("body_encoding", "text"))
    if body is None:
        return False
    tag = item.get("tag")
    if tag is not None and (
        tag.__class__ is not str or (tag and tag != tag.strip()) or not _text(tag)
    ):
        return False
    properties = item.get("properties")
    if properties is not None:
        if properties.__class__ is not dict:
            return False
        for name, value in properties.items():
            if not name or value.__class__ is not str or not _text(name, 0) or not _text(value, 0):
                return False
            if is_reserved_property(name):  # the serializer says why
                return False
    sharding_key = item.get("sharding_key")
    if sharding_key is not None and (
        sharding_key.__class__ is not str
        or not sharding_key
        or sharding_key != sharding_key.strip()
        or not _text(sharding_key)
    ):
        return False
    queue_id = item.get("queue_id")
    if queue_id is not None and not _int(queue_id):
        return False
    delay_level = item.get("delay_level", 0)
    if not _int(delay_level):
        return False
    m.body = body
    m.tag = tag or None
    m.properties = dict(properties) if properties else {}
    m.queue_id = queue_id
    m.sharding_key = sharding_key
    m.delay_level = delay_level
    return True


def _body(body: Any, encoding: Any) -> bytes | None:
    """``decode_body``'s bytes, or None where it (or the field checks) would refuse."""
    if encoding == "text" and encoding.__class__ is str:
        if body.__class__ is not str or not body:
            return None
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError:
            return None
    if encoding == "base64" and encoding.__class__ is str:
        if body.__class__ is not str:
            return None
        try:
            return base64.b64decode(body.encode("ascii"), validate=True) or None
        except (binascii.Error, UnicodeEncodeError, ValueError):
            return None
    if encoding == "json" and encoding.__class__ is str and body is not None:
        try:
            return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:
            return None
    return None


def _text(value: str, max_length: int = _MAX_TEXT) -> bool:
    """Text DRF's CharField and ``record_text`` keep as it is: within ``max_length`` (0: no
    limit), no NUL (DRF refuses it), no record separators, no lone surrogates."""
    if max_length and len(value) > max_length:
        return False
    if "\x00" in value or "\x01" in value or "\x02" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _int(value: Any) -> bool:
    """A JSON integer within the serializer's bounds (bools, floats and strings: no)."""
    return value.__class__ is int and 0 <= value <= INT32_MAX
