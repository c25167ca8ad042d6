"""Topic and group names as a person types them: Kafka's spelling accepted.

Kafka names (``shop.orders``) are stored with every ``.`` turned into ``|`` (``shop|orders``),
the mapping the Kafka listener (:mod:`kafka_listener.mapping`) and the REST ACL entries
(``api.serializers.accounts``) use. Store names never hold a ``.`` (spec 8.7), so the
mapping is a bijection: whatever is typed or linked in the console goes through
:func:`store_name` before any rule or lookup, and links may use the Kafka spelling.
"""

from __future__ import annotations

__all__ = ["NameConverter", "kafka_name", "store_name"]


def store_name(typed: str) -> str:
    """The store's spelling of a typed topic or group name (``shop.orders`` → ``shop|orders``)."""
    return typed.replace(".", "|")


def kafka_name(name: str) -> str:
    """The spelling Kafka clients use for a store name (``shop|orders`` → ``shop.orders``);
    names with ``%`` (retry, DLQ) are not Kafka's and stay as they are."""
    return name if "%" in name else name.replace("|", ".")


class NameConverter:
    """URL converter for topic and group names: ``/topics/shop.orders/`` and
    ``/topics/shop%7Corders/`` are the same page; reversed links use the Kafka spelling,
    which needs no escaping."""

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return store_name(value)

    def to_url(self, value: str) -> str:
        return kafka_name(value)
