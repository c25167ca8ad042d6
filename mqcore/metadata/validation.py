"""Checks shared by the config managers: names (spec 8.7) and typed access to parsed JSON.

Two levels of checking, used on purpose in different places:

* **Shape** (:class:`JsonObject`): types and Java integer ranges. Applied to everything read,
  including our own files at load, so that garbage counts as unreadable and the loader falls back
  to ``X.bak``.
* **Rules** (names, queue counts, perm bits, enumerations): applied to what comes *in* through
  the API and document imports, never to files at load. A file RocketMQ wrote loads even if a
  rule here is stricter than RocketMQ's.

Every failure is a :class:`~mqcore.errors.ValidationError` whose ``field`` names where (a Python
field name, or a JSON path such as ``topicConfigTable.TopicA.perm``) and whose ``rule`` is a short
token (``type``, ``range``, ``pattern``, ``length``, ``blank``, ``choice``, ``required``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from mqcore.errors import ValidationError

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# spec 8.7, TopicValidator / Validators.java
NAME_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")
TOPIC_MAX_LENGTH = 127
RETRY_DLQ_TOPIC_MAX_LENGTH = 255
GROUP_MAX_LENGTH = 120
RETRY_TOPIC_PREFIX = "%RETRY%"
DLQ_TOPIC_PREFIX = "%DLQ%"


def _check_name(name: object, field: str, kind: str, max_length: int) -> str:
    if not isinstance(name, str):
        raise ValidationError(field, "type", f"{kind} name must be a string, not {name!r}")
    if not name.strip():
        raise ValidationError(field, "blank", f"{kind} name must not be blank")
    if len(name) > max_length:
        raise ValidationError(
            field,
            "length",
            f"{kind} name {name[:40]!r}... is {len(name)} characters; the limit is {max_length}",
        )
    if NAME_PATTERN.fullmatch(name) is None:
        raise ValidationError(
            field,
            "pattern",
            f"{kind} name {name!r} may only contain ASCII letters, digits, '%', '|', '_' and '-'",
        )
    return name


def validate_topic_name(name: object, field: str = "topic_name") -> str:
    """Check a topic name (spec 8.7): ``[%|a-zA-Z0-9_-]+``, at most 127 characters, or 255
    for ``%RETRY%``/``%DLQ%`` topics.

    Returns:
        The name. Raises :class:`ValidationError` otherwise.
    """
    limit = TOPIC_MAX_LENGTH
    if isinstance(name, str) and name.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX)):
        limit = RETRY_DLQ_TOPIC_MAX_LENGTH
    return _check_name(name, field, "topic", limit)


def validate_group_name(name: object, field: str = "group_name") -> str:
    """Check a consumer group name (spec 8.7): ``[%|a-zA-Z0-9_-]+``, at most 120 characters."""
    return _check_name(name, field, "group", GROUP_MAX_LENGTH)


def check_int(value: object, field: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    """``value`` must be an int (not a bool) within ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(field, "type", f"{field} must be an integer, not {value!r}")
    if not lo <= value <= hi:
        raise ValidationError(
            field, "range", f"{field} must be between {lo} and {hi} (got {value})"
        )
    return value


def check_bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(field, "type", f"{field} must be true or false, not {value!r}")
    return value


def check_str(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, "type", f"{field} must be a string, not {value!r}")
    return value


def check_choice(value: object, field: str, choices: Collection[str]) -> str:
    if value not in choices:
        allowed = ", ".join(sorted(choices))
        raise ValidationError(field, "choice", f"{field} must be one of {allowed} (got {value!r})")
    return str(value)


def check_str_map(value: object, field: str) -> dict[str, str]:
    """A JSON object whose keys and values are all strings; returns a copy."""
    if not isinstance(value, Mapping):
        raise ValidationError(field, "type", f"{field} must be an object, not {value!r}")
    out: dict[str, str] = {}
    for key, item in value.items():
        out[check_str(key, f"{field} key")] = check_str(item, f"{field}.{key}")
    return out


def parse_int_key(key: object, field: str, lo: int = INT32_MIN, hi: int = INT32_MAX) -> int:
    """A map key that stands for a Java Integer: a bare int, or a string of digits."""
    if isinstance(key, str):
        try:
            key = int(key, 10)
        except ValueError:
            raise ValidationError(
                field, "type", f"{field} has key {key!r}, which is not an integer"
            ) from None
    return check_int(key, f"{field} key", lo, hi)


class JsonObject:
    """Typed read access to one parsed JSON object; every error names the JSON path."""

    __slots__ = ("path", "raw")

    def __init__(self, raw: object, path: str) -> None:
        if not isinstance(raw, dict):
            where = path or "document"
            raise ValidationError(where, "type", f"{where} must be a JSON object, not {raw!r:.60}")
        self.raw: dict[Any, Any] = raw
        self.path = path

    def _field(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def _present(self, key: str, required: bool) -> bool:
        if self.raw.get(key) is not None:
            return True
        if required:
            raise ValidationError(self._field(key), "required", f"{self._field(key)} is missing")
        return False

    def get_int(
        self,
        key: str,
        default: int | None = None,
        lo: int = INT64_MIN,
        hi: int = INT64_MAX,
    ) -> int:
        """The integer at ``key``; ``default`` when absent (required when ``default`` is None)."""
        if not self._present(key, default is None):
            assert default is not None
            return default
        return check_int(self.raw[key], self._field(key), lo, hi)

    def get_bool(self, key: str, default: bool) -> bool:
        if not self._present(key, False):
            return default
        return check_bool(self.raw[key], self._field(key))

    def get_str(self, key: str) -> str:
        """A required string."""
        self._present(key, True)
        return check_str(self.raw[key], self._field(key))

    def get_opt_str(self, key: str) -> str | None:
        if not self._present(key, False):
            return None
        return check_str(self.raw[key], self._field(key))

    def get_object(self, key: str, required: bool = False) -> JsonObject | None:
        if not self._present(key, required):
            return None
        return JsonObject(self.raw[key], self._field(key))

    def get_str_map(self, key: str) -> dict[str, str]:
        """A string-to-string object; empty when absent."""
        if not self._present(key, False):
            return {}
        return check_str_map(self.raw[key], self._field(key))

    def get_int_list(self, key: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> list[int] | None:
        if not self._present(key, False):
            return None
        items = self.raw[key]
        field = self._field(key)
        if not isinstance(items, list):
            raise ValidationError(field, "type", f"{field} must be a list, not {items!r:.60}")
        return [check_int(item, f"{field}[{i}]", lo, hi) for i, item in enumerate(items)]

    def items(self) -> list[tuple[Any, Any]]:
        return list(self.raw.items())

    def child_path(self, key: object) -> str:
        return self._field(str(key))
