"""Delay levels and the tag code of delayed records (spec 3.1, 9).

A message sent with ``DELAY`` = level > 0 is parked in topic ``SCHEDULE_TOPIC_XXXX``, queue
``level - 1``. Its consume-queue tag code is not the hash of its tag but its **deliver time**,
``STORETIMESTAMP + delay(level)``, so the schedule service can compare it with the clock
without reading the CommitLog.

``messageDelayLevel`` (default ``"1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"``)
lists one duration per level, level 1 first; units s, m, h, d.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mqcore.errors import ValidationError
from mqcore.format.properties import PROPERTY_DELAY_TIME_LEVEL

__all__ = [
    "DEFAULT_DELAY_LEVELS",
    "DEFAULT_DELAY_LEVELS_MS",
    "SCHEDULE_TOPIC",
    "parse_delay_levels",
    "schedule_deliver_ms",
]

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(levels: str) -> tuple[int, ...]:
    """Parse a ``messageDelayLevel`` string into milliseconds per level (level 1 first).

    Raises:
        ValidationError: field ``messageDelayLevel``, rule ``format``: an entry is not digits
            followed by one of s, m, h, d, or entries are not separated by single spaces
            (RocketMQ refuses to start on such a value too).
    """
    result: list[int] = []
    for entry in levels.strip().split(" "):
        number, unit = entry[:-1], entry[-1:]
        if not (number.isascii() and number.isdigit()) or unit not in _UNIT_MS:
            raise ValidationError(
                "messageDelayLevel",
                "format",
                "messageDelayLevel: each level must be a number followed by s, m, h or d,"
                f" separated by single spaces (got {entry!r})",
            )
        result.append(int(number) * _UNIT_MS[unit])
    return tuple(result)


DEFAULT_DELAY_LEVELS_MS = parse_delay_levels(DEFAULT_DELAY_LEVELS)


def _java_parse_int(text: str) -> int | None:
    """``Integer.parseInt`` for ASCII input; None where Java would throw."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not (digits.isascii() and digits.isdigit()):
        return None
    value = int(text)
    return value if -(1 << 31) <= value < (1 << 31) else None


def schedule_deliver_ms(
    properties: Mapping[str, str],
    store_timestamp: int,
    delay_levels_ms: Sequence[int] = DEFAULT_DELAY_LEVELS_MS,
) -> int | None:
    """The tag code of a ``SCHEDULE_TOPIC_XXXX`` record: its deliver time, if it has one.

    ``DELAY`` is clamped to the highest level, so every level > 0 is in the table (Java's
    "level missing from the table: +1000 ms" case cannot arise). A level <= 0 (or no ``DELAY``)
    gives None,
    meaning "keep the TAGS hash". RocketMQ throws on a non-numeric ``DELAY``, which fails the
    record and stalls reput; here such a value also gives None.

    Args:
        properties: the record's properties.
        store_timestamp: the record's STORETIMESTAMP (ms).
        delay_levels_ms: ms per level, level 1 first.

    Returns:
        ``store_timestamp + delay`` in epoch ms, or None.
    """
    text = properties.get(PROPERTY_DELAY_TIME_LEVEL)
    if text is None:
        return None
    level = _java_parse_int(text)
    if level is None:
        return None
    level = min(level, len(delay_levels_ms))
    if level <= 0:
        return None
    return store_timestamp + delay_levels_ms[level - 1]
