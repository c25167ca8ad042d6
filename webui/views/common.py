"""What the page views share: form validation through the REST API's serializers, and
turning broker refusals into form errors."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers

from api.exceptions import flatten_errors
from mqcore.errors import MQError


def validate(
    serializer: type[serializers.Serializer], data: dict[str, Any]
) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """``(validated data, {})`` or ``(None, {field: first message})``, using the same
    serializer as the REST API (same rules, same messages)."""
    s = serializer(data=data)
    if s.is_valid():
        return dict(s.validated_data), {}
    errors: dict[str, str] = {}
    for item in flatten_errors(s.errors):
        errors.setdefault(item["field"].split(".")[0].split("[")[0] or "__all__", item["detail"])
    return None, errors


def mq_errors(exc: MQError, aliases: dict[str, str] | None = None) -> dict[str, str]:
    """A broker refusal as ``{field: message}`` (``__all__`` when it names no form field)."""
    raw = str(getattr(exc, "field", "") or "")
    field = re.sub(r"^messages\[\d+\]\.", "", raw)
    field = (aliases or {}).get(field, field)
    message = str(exc)
    prefix = f"{raw}: "
    if message.startswith(prefix):
        message = message[len(prefix) :]
    return {field or "__all__": message}


def checkbox(data: Any, name: str) -> bool:
    return str(data.get(name, "")).lower() in {"on", "true", "1", "yes"}
