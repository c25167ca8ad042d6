"""What the page views share: form validation through the REST API's serializers, and
turning broker refusals into form errors."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.http import HttpResponse
from rest_framework import serializers

from mqcore.errors import MQError
from shared.serializers.errors import flatten_errors


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


def submit_form(
    parsed: tuple[dict[str, Any], dict[str, str]],
    serializer: type[serializers.Serializer],
    aliases: dict[str, str],
    change: Callable[[dict[str, Any]], HttpResponse],
) -> tuple[HttpResponse | None, dict[str, str]]:
    """A posted form's way through: its parse errors, then the REST serializer's rules, then
    ``change`` (the broker call, the audit record and the redirect).

    Returns:
        ``(change's response, {})``, or ``(None, {field: message})`` when a rule or the broker
        refused.
    """
    data, errors = parsed
    if errors:
        return None, errors
    valid, errors = validate(serializer, data)
    if valid is None:
        return None, errors
    try:
        return change(valid), {}
    except MQError as exc:
        return None, mq_errors(exc, aliases)


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
