"""Messages: the send body, the three read modes' query parameters, and messages out.

Bodies go in as ``text`` (UTF-8 string), ``base64`` (standard alphabet, padding required) or
``json`` (any JSON value, stored as its compact UTF-8 encoding). They come out as text when
they are valid UTF-8, else base64, and ``body_encoding`` says which (``?body_encoding=base64``
forces base64).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from mqcore.broker.types import OutgoingMessage, SendResult
from mqcore.kafka_properties import is_reserved_property, produced_headers
from mqcore.message import MessageExt
from shared.serializers.common import (
    INT32_MAX,
    INT64_MAX,
    MAX_QUEUE_ID,
    EpochMsField,
    Int,
    StrictSerializer,
    StrMapField,
    record_text,
)

BODY_ENCODINGS = ["text", "base64", "json"]


@extend_schema_field(OpenApiTypes.ANY)
class AnyJSONField(serializers.Field):
    """Any JSON value, untouched (the body's meaning depends on ``body_encoding``)."""

    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> Any:
        return value


class KeysField(serializers.ListField):
    """Business keys: a list of strings without whitespace (``KEYS`` separates with spaces).
    A single string is taken as space-separated keys."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("child", serializers.CharField(max_length=1024, validators=[record_text]))
        kwargs.setdefault("max_length", 64)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> list[str]:
        if isinstance(data, str):
            data = data.split()
        keys: list[str] = super().to_internal_value(data)
        for index, key in enumerate(keys):
            if not key.strip() or any(ch.isspace() for ch in key):
                raise serializers.ValidationError(
                    {
                        index: [
                            serializers.ErrorDetail(
                                "a key may not be blank or contain whitespace", code="characters"
                            )
                        ]
                    }
                )
        return keys


def decode_body(body: Any, encoding: str) -> bytes:
    """The body bytes; raises a DRF ValidationError naming ``body`` and the rule."""
    if encoding == "json":
        body = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    elif not isinstance(body, str):
        raise serializers.ValidationError(
            {"body": [serializers.ErrorDetail(f"a {encoding} body must be a string", code="type")]}
        )
    if encoding == "base64":
        try:
            return base64.b64decode(body.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise serializers.ValidationError(
                {
                    "body": [
                        serializers.ErrorDetail(
                            "not valid base64 (standard alphabet, padded)", code="base64"
                        )
                    ]
                }
            ) from None
    try:
        return body.encode("utf-8")
    except UnicodeEncodeError:
        raise serializers.ValidationError(
            {
                "body": [
                    serializers.ErrorDetail(
                        "not valid Unicode text (lone surrogate)", code="encoding"
                    )
                ]
            }
        ) from None


class MessageInSerializer(StrictSerializer):
    """One message to send."""

    body = AnyJSONField(help_text="a string (text, base64) or any JSON value (json)")
    body_encoding = serializers.ChoiceField(BODY_ENCODINGS, default="text")
    keys = KeysField(required=False, help_text="business keys, indexed for key queries")
    tag = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=1024, validators=[record_text]
    )
    properties = StrMapField(
        required=False, help_text="user properties (names RocketMQ reserves are refused)"
    )
    queue_id = Int(
        0, MAX_QUEUE_ID, required=False, allow_null=True, help_text="omit to let the broker choose"
    )
    sharding_key = serializers.CharField(
        required=False,
        allow_null=True,
        max_length=1024,
        validators=[record_text],
        help_text="same key, same queue (ignored when queue_id is set)",
    )
    delay_level = Int(0, INT32_MAX, default=0, help_text="1..18 (1 s ... 2 h); 0 for none")

    def validate_properties(self, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not name:
                raise serializers.ValidationError("a property name may not be empty", code="blank")
            if is_reserved_property(name):
                # The Kafka listener's bookkeeping: sent under such a name, a property would
                # be read back as a Kafka record's headers (mqcore/kafka_properties.py).
                raise serializers.ValidationError(
                    f"property {name!r}: names starting with '__kafka.' are reserved",
                    code="reserved_name",
                )
            record_text(name)
            record_text(text)
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs["body"] = decode_body(attrs.get("body"), attrs["body_encoding"])
        return attrs

    def to_outgoing(self, attrs: dict[str, Any]) -> OutgoingMessage:
        return message_from(attrs)


def message_from(attrs: dict[str, Any]) -> OutgoingMessage:
    return OutgoingMessage(
        body=attrs["body"],
        tag=attrs.get("tag") or None,
        keys=" ".join(attrs.get("keys") or ()),  # as api.send_input: the KEYS value
        properties=dict(attrs.get("properties") or {}),
        queue_id=attrs.get("queue_id"),
        sharding_key=attrs.get("sharding_key") or None,
        delay_level=attrs.get("delay_level", 0),
    )


class SendSerializer(StrictSerializer):
    """``{"messages": [...]}``: stored all together, or not at all."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["messages"] = MessageInSerializer(
            many=True,
            min_length=1,
            max_length=int(settings.CAIRN_API["MAX_BATCH_MESSAGES"]),
            allow_empty=False,
        )

    messages = MessageInSerializer(many=True, allow_empty=False)


class SendResultSerializer(serializers.Serializer):
    msg_id = serializers.CharField(help_text="UNIQ_KEY, the id clients know")
    offset_msg_id = serializers.CharField(help_text="store host + commit-log offset")
    topic = serializers.CharField()
    broker_name = serializers.CharField()
    queue_id = serializers.IntegerField()
    queue_offset = serializers.IntegerField(
        help_text="for a delayed message: its offset in SCHEDULE_TOPIC_XXXX (delayed is true)"
    )
    store_timestamp = serializers.IntegerField()
    status = serializers.CharField()
    delayed = serializers.BooleanField()

    def to_representation(self, instance: SendResult) -> dict[str, Any]:
        return send_result(instance)


def send_result(r: SendResult) -> dict[str, Any]:
    return {
        "msg_id": r.msg_id,
        "offset_msg_id": r.offset_msg_id,
        "topic": r.topic,
        "broker_name": r.broker_name,
        "queue_id": r.queue_id,
        "queue_offset": r.queue_offset,
        "store_timestamp": r.store_timestamp,
        "status": str(r.status),
        "delayed": r.delayed,
    }


class SendResponseSerializer(serializers.Serializer):
    results = SendResultSerializer(many=True)


# -- reading --------------------------------------------------------------------------------


def _page_limit() -> int:
    return int(settings.CAIRN_API["MAX_PAGE_MESSAGES"])


class ReadQuerySerializer(serializers.Serializer):
    """Query parameters of ``GET /topics/{topic}/messages``; the mode follows from which are
    given: ``key`` (key query), ``queue_id`` (pull), else a time browse."""

    key = serializers.CharField(required=False, max_length=1024)
    queue_id = Int(0, MAX_QUEUE_ID, required=False)
    offset = Int(0, INT64_MAX, required=False, help_text="pull: the first queue offset (default 0)")
    wait_ms = Int(
        0, 30_000, required=False, help_text="pull: long-poll up to this long for a message"
    )
    tag = serializers.CharField(
        required=False, max_length=4096, help_text="pull: tag expression, e.g. 'A || B'"
    )
    begin = EpochMsField(required=False, help_text="key query and browse: from (ms, default 0)")
    end = EpochMsField(required=False, help_text="key query and browse: to (ms, default now)")
    cursor = serializers.CharField(
        required=False, max_length=8192, help_text="browse: next_cursor of the previous page"
    )
    limit = Int(1, 1_000, required=False, help_text="most messages returned (default 32)")
    body_encoding = serializers.ChoiceField(["auto", "base64"], default="auto")

    def validate_wait_ms(self, value: int) -> int:
        cap = int(settings.CAIRN_API["MAX_WAIT_MS"])
        if value > cap:
            raise serializers.ValidationError(f"at most {cap}", code="range")
        return value

    def validate_limit(self, value: int) -> int:
        if value > _page_limit():
            raise serializers.ValidationError(f"at most {_page_limit()}", code="range")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "key" in attrs and "queue_id" in attrs:
            raise serializers.ValidationError(
                {
                    "queue_id": [
                        serializers.ErrorDetail(
                            "give key (key query) or queue_id (pull), not both", code="exclusive"
                        )
                    ]
                }
            )
        mode = "key" if "key" in attrs else "pull" if "queue_id" in attrs else "browse"
        allowed = {
            "key": {"key", "begin", "end", "limit"},
            "pull": {"queue_id", "offset", "wait_ms", "tag", "limit"},
            "browse": {"begin", "end", "cursor", "limit"},
        }[mode] | {"body_encoding"}
        stray = sorted(set(attrs) - allowed)
        if stray:
            raise serializers.ValidationError(
                {
                    stray[0]: [
                        serializers.ErrorDetail(
                            f"not a parameter of a {mode} read", code="exclusive"
                        )
                    ]
                }
            )
        if attrs.get("end") is not None and attrs.get("begin", 0) > attrs["end"]:
            raise serializers.ValidationError(
                {"end": [serializers.ErrorDetail("end must not be before begin", code="range")]}
            )
        attrs["mode"] = mode
        return attrs


def render_body(body: bytes, force_base64: bool = False) -> tuple[str, str]:
    """(body, encoding): UTF-8 text when it decodes, else base64."""
    if not force_base64:
        try:
            return body.decode("utf-8"), "text"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(body).decode("ascii"), "base64"


class HeaderOutSerializer(serializers.Serializer):
    """One Kafka header: its value as text when it is UTF-8, else base64; null for a null
    header."""

    name = serializers.CharField()
    value = serializers.CharField(allow_null=True)
    value_encoding = serializers.ChoiceField(["text", "base64"])


class MessageOutSerializer(serializers.Serializer):
    """A stored message. ``properties`` are the user's; ``system_properties`` the broker's
    (TAGS, KEYS, UNIQ_KEY, DELAY, REAL_TOPIC ...). The Kafka listener's own ``__kafka.*``
    properties are in neither: ``headers`` shows the Kafka headers they hold."""

    msg_id = serializers.CharField()
    offset_msg_id = serializers.CharField()
    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    queue_offset = serializers.IntegerField()
    commitlog_offset = serializers.IntegerField()
    keys = serializers.ListField(child=serializers.CharField())
    tag = serializers.CharField(allow_null=True)
    properties = serializers.DictField(child=serializers.CharField())
    system_properties = serializers.DictField(child=serializers.CharField())
    headers = HeaderOutSerializer(
        many=True,
        allow_null=True,
        help_text="the Kafka headers a Kafka producer sent, in order; null when it sent none "
        "(Kafka consumers then get the user properties as headers)",
    )
    body = serializers.CharField()
    body_encoding = serializers.ChoiceField(["text", "base64"])
    body_size = serializers.IntegerField()
    born_timestamp = serializers.IntegerField()
    born_host = serializers.CharField()
    store_timestamp = serializers.IntegerField()
    store_host = serializers.CharField()
    reconsume_times = serializers.IntegerField()
    flag = serializers.IntegerField()
    sys_flag = serializers.IntegerField()
    store_size = serializers.IntegerField()
    archived = serializers.BooleanField(
        required=False,
        help_text="key query only: true when the message came from the data pipeline's "
        "archive because cleanup deleted it from the CommitLog",
    )

    def to_representation(self, instance: MessageExt) -> dict[str, Any]:
        return message_dict(instance, bool(self.context.get("force_base64")))


def message_dict(m: MessageExt, force_base64: bool = False) -> dict[str, Any]:
    body, encoding = render_body(m.body, force_base64)
    user = m.user_properties()
    headers = produced_headers(m.properties)
    return {
        "msg_id": m.msg_id,
        "offset_msg_id": m.offset_msg_id,
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commitlog_offset": m.phys_offset,
        "keys": list(m.keys),
        "tag": m.tags,
        "properties": {k: v for k, v in user.items() if not is_reserved_property(k)},
        "system_properties": {k: v for k, v in m.properties.items() if k not in user},
        "headers": None if headers is None else [header_dict(n, v) for n, v in headers],
        "body": body,
        "body_encoding": encoding,
        "body_size": len(m.body),
        "born_timestamp": m.born_timestamp,
        "born_host": str(m.born_host),
        "store_timestamp": m.store_timestamp,
        "store_host": str(m.store_host),
        "reconsume_times": m.reconsume_times,
        "flag": m.flag,
        "sys_flag": m.sys_flag,
        "store_size": m.store_size,
    }


def header_dict(name: str, value: bytes | None) -> dict[str, Any]:
    if value is None:
        return {"name": name, "value": None, "value_encoding": "text"}
    text, encoding = render_body(value, False)
    return {"name": name, "value": text, "value_encoding": encoding}


class PullPageSerializer(serializers.Serializer):
    """Key query: ``messages`` only. Pull adds ``status`` and offsets. Browse adds
    ``next_cursor`` and ``exhausted``."""

    mode = serializers.ChoiceField(["key", "pull", "browse"])
    messages = MessageOutSerializer(many=True)
    status = serializers.ChoiceField(
        ["FOUND", "NO_NEW_MSG", "NO_MATCHED_MSG", "OFFSET_ILLEGAL"], required=False
    )
    next_offset = serializers.IntegerField(required=False)
    min_offset = serializers.IntegerField(required=False)
    max_offset = serializers.IntegerField(required=False)
    next_cursor = serializers.CharField(required=False, allow_null=True)
    exhausted = serializers.BooleanField(required=False)


class ConsumeStatusSerializer(serializers.Serializer):
    group = serializers.CharField()
    state = serializers.ChoiceField(["CONSUMED", "PENDING", "RETRYING", "DLQ"])
    committed_offset = serializers.IntegerField(allow_null=True)
    reconsume_times = serializers.IntegerField()


class MessageDetailSerializer(MessageOutSerializer):
    """A message found by either id, with each group's consume status."""

    home_topic = serializers.CharField(help_text="the topic the producer sent it to")
    broker_name = serializers.CharField()
    consume_status = ConsumeStatusSerializer(many=True)


class MessageDetailQuerySerializer(serializers.Serializer):
    body_encoding = serializers.ChoiceField(["auto", "base64"], default="auto")


class RetrySerializer(StrictSerializer):
    delay_level = Int(
        -1,
        INT32_MAX,
        default=0,
        help_text="0: the group's next level (3 + reconsume times); -1: straight to the DLQ",
    )
    max_reconsume_times = Int(0, INT32_MAX, required=False, allow_null=True)


class SendBackResultSerializer(serializers.Serializer):
    action = serializers.ChoiceField(["RETRY", "DLQ", "DROPPED"])
    reconsume_times = serializers.IntegerField()
    delay_level = serializers.IntegerField()
    result = SendResultSerializer(allow_null=True)
