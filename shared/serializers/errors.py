"""A serializer's errors as a flat list, one entry per broken rule, with the field's path:
what REST's problem+json lists (``api.exceptions``) and what the console's forms show next to
each field (``webui.views.common``)."""

from __future__ import annotations

from typing import Any

# DRF's error codes, renamed to the rules mqcore uses for the same thing.
DRF_RULES = {
    "invalid": "type",
    "not_a_list": "type",
    "not_a_dict": "type",
    "min_value": "range",
    "max_value": "range",
    "max_string_length": "range",
    "max_digits": "range",
    "invalid_choice": "choice",
    "min_length": "min_length",
    "empty": "empty",
    "null": "null",
    "date": "type",
    "make_aware": "type",
    "overflow": "range",
}


def flatten_errors(detail: Any, path: str = "") -> list[dict[str, str]]:
    """DRF's nested error detail as ``[{"field": "messages[0].body", "rule", "detail"}]``."""
    if isinstance(detail, dict):
        out: list[dict[str, str]] = []
        for key, value in detail.items():
            if key in ("non_field_errors", "detail"):
                child = path
            elif isinstance(key, int):  # ListField / DictField children
                child = f"{path}[{key}]"
            elif path:
                child = f"{path}.{key}"
            else:
                child = str(key)
            out += flatten_errors(value, child)
        return out
    if isinstance(detail, list):
        if all(isinstance(item, str) for item in detail):
            return [e for item in detail for e in flatten_errors(item, path)]
        out = []
        for index, value in enumerate(detail):
            if value:  # a list serializer reports {} for the items that were fine
                out += flatten_errors(value, f"{path}[{index}]")
        return out
    code = str(getattr(detail, "code", "invalid") or "invalid")
    return [{"field": path, "rule": DRF_RULES.get(code, code), "detail": str(detail)}]
