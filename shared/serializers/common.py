"""Fields and checks shared by the serializers.

Every integer field has both bounds, so no out-of-range number ever reaches mqcore (where it
would overflow a struct field); names are checked with mqcore's own rules, and mqcore's
``ValidationError(field, rule)`` becomes a DRF error whose code is the rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from mqcore.errors import ValidationError as MQValidationError
from mqcore.validation import validate_group, validate_topic

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_QUEUE_ID = INT32_MAX
MAX_TIMESTAMP_MS = INT64_MAX
_RECORD_SEPARATORS = ("\x01", "\x02")  # property name/value and pair separators (spec 1.5)


def mq_check(check: Callable[..., Any], value: Any, *args: Any) -> Any:
    """Run an mqcore check; its ValidationError becomes a DRF one with ``code=rule``."""
    try:
        return check(value, *args)
    except MQValidationError as exc:
        message = str(exc).removeprefix(f"{exc.field}: ")
        raise serializers.ValidationError(message, code=exc.rule) from None


def topic_name(value: str) -> str:
    mq_check(validate_topic, value, "name")
    return value


def group_name(value: str) -> str:
    mq_check(validate_group, value, "name")
    return value


_NAME_REGEX = r"^[%|a-zA-Z0-9_-]+$"


@extend_schema_field({"type": "string", "pattern": _NAME_REGEX, "maxLength": 255})
class TopicNameField(serializers.CharField):
    """A topic name, checked by mqcore's rules (``characters``, ``max_length`` ...)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=255, validators=[topic_name], **kwargs)


@extend_schema_field({"type": "string", "pattern": _NAME_REGEX, "maxLength": 120})
class GroupNameField(serializers.CharField):
    """A group name, checked by mqcore's rules."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=255, validators=[group_name], **kwargs)


def record_text(value: str) -> str:
    """Text that goes into a record's properties: valid UTF-8, no separator characters."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise serializers.ValidationError(
            "must be valid Unicode text (no lone surrogates)", code="encoding"
        ) from None
    if any(sep in value for sep in _RECORD_SEPARATORS):
        raise serializers.ValidationError(
            "must not contain the control characters \\u0001 or \\u0002", code="characters"
        )
    return value


class StrictSerializer(serializers.Serializer):
    """Refuses keys it does not know (a typo is an error, not a silent no-op), and numbers
    or booleans where the schema says string (DRF's CharField would store ``86400.0``)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(k) for k in data if k not in self.fields)
            if unknown:
                raise serializers.ValidationError(
                    {
                        name: [serializers.ErrorDetail("unknown field", code="unknown_field")]
                        for name in unknown
                    }
                )
            not_text = sorted(
                name
                for name, field in self.fields.items()
                if isinstance(field, serializers.CharField)
                and not field.read_only
                and isinstance(data.get(name), int | float | bool)
            )
            if not_text:
                raise serializers.ValidationError(
                    {
                        name: [serializers.ErrorDetail("must be a string", code="invalid")]
                        for name in not_text
                    }
                )
        return super().to_internal_value(data)


def Int(lo: int, hi: int, **kwargs: Any) -> serializers.IntegerField:  # noqa: N802
    """An integer field bounded on both sides (JSON numbers only, or digit strings in queries)."""
    return serializers.IntegerField(min_value=lo, max_value=hi, **kwargs)


def Text(**kwargs: Any) -> serializers.CharField:  # noqa: N802
    kwargs.setdefault("max_length", 4096)
    return serializers.CharField(**kwargs)


class StrMapField(serializers.DictField):
    """``{str: str}`` for attributes and properties."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("child", serializers.CharField(allow_blank=True, trim_whitespace=False))
        super().__init__(**kwargs)


class EpochMsField(serializers.IntegerField):
    """A time as epoch milliseconds."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", MAX_TIMESTAMP_MS)
        super().__init__(**kwargs)


class PageQuerySerializer(serializers.Serializer):
    """``?limit=&offset=`` of the lists."""

    limit = serializers.IntegerField(min_value=1, max_value=1000, default=100, help_text="1..1000")
    offset = serializers.IntegerField(min_value=0, max_value=INT64_MAX, default=0)


class ProblemItemSerializer(serializers.Serializer):
    field = serializers.CharField()
    rule = serializers.CharField()
    detail = serializers.CharField()


class ProblemSerializer(serializers.Serializer):
    """RFC 7807 problem details, as every error response carries (application/problem+json)."""

    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()
    field = serializers.CharField()
    rule = serializers.CharField()
    errors = ProblemItemSerializer(many=True)


def page_serializer(name: str, item: type[serializers.Serializer]) -> type:
    """``{"count", "next", "previous", "results": [item]}`` (limit/offset paging)."""
    return type(
        name,
        (serializers.Serializer,),
        {
            "count": serializers.IntegerField(),
            "next": serializers.CharField(allow_null=True),
            "previous": serializers.CharField(allow_null=True),
            "results": item(many=True),
            "__doc__": f"One page of {item.__name__.removesuffix('Serializer')} items.",
        },
    )
