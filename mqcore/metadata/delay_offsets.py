"""Delay-level progress, ``delayOffset.json`` (spec 8.5), and delay-level parsing (spec 9).

File layout (bare integer keys, on the line of the ``{``)::

    {
    →"dataVersion":{...},
    →"offsetTable":{1:0,2:17,3:5
    →}
    }

Key = delay level (1-based), value = the next queue offset to deliver in ``SCHEDULE_TOPIC_XXXX``
queue ``level - 1``. Legacy 4.x files have only ``offsetTable``.

Invariants and crash behaviour: updates change memory only; :meth:`DelayOffsetManager.persist`
writes atomically (RocketMQ: every ``flushDelayOffsetInterval`` = 10 s, and at shutdown). A crash
loses the progress since the last persist, so those delayed messages are delivered again
(at-least-once). After loading, the owner calls :meth:`DelayOffsetManager.clamp` with each
queue's [min, max] offsets, as RocketMQ's ``correctDelayOffset`` does, so a file ahead of or
behind the queue cannot stall delivery. ``dataVersion`` is bumped on every 200th update
(``delayOffsetUpdateVersionStep``). All public methods are thread-safe.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from mqcore.clock import Clock
from mqcore.errors import ValidationError
from mqcore.metadata.config_file import ConfigFileManager
from mqcore.metadata.data_version import DataVersion
from mqcore.metadata.jsonfile import Bean, StrPath, dumps_fastjson
from mqcore.metadata.validation import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    JsonObject,
    check_int,
    check_str,
    parse_int_key,
)

log = logging.getLogger(__name__)

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
UPDATE_VERSION_STEP = 200  # delayOffsetUpdateVersionStep
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LEVEL = re.compile(r"([0-9]+)([smhd])")


def parse_delay_levels(spec: str = DEFAULT_DELAY_LEVELS) -> tuple[int, ...]:
    """Parse ``messageDelayLevel``: space-separated durations with an s/m/h/d suffix.

    Level *n* (1-based) is the *n*-th duration. The default gives 18 levels,
    ``(1000, 5000, 10000, 30000, 60000, ..., 7200000)``.

    Returns:
        Each level's delay in milliseconds, level 1 first.

    Raises:
        ValidationError: field ``message_delay_level``; rule ``blank`` when there is no level,
            ``format`` when a token is not a whole number followed by s, m, h or d.
    """
    check_str(spec, "message_delay_level")
    tokens = spec.split()
    if not tokens:
        raise ValidationError("message_delay_level", "blank", "message_delay_level has no levels")
    levels: list[int] = []
    for position, token in enumerate(tokens, start=1):
        match = _LEVEL.fullmatch(token)
        if match is None:
            raise ValidationError(
                "message_delay_level",
                "format",
                f"delay level {position} is {token!r}; write a whole number followed by "
                "s, m, h or d (e.g. 10s, 5m)",
            )
        levels.append(int(match.group(1)) * _UNIT_MS[match.group(2)])
    return tuple(levels)


@dataclass(frozen=True, slots=True)
class _DelayState:
    table: dict[int, int]
    version: DataVersion


class DelayOffsetManager(ConfigFileManager[_DelayState]):
    """``delay level → next offset`` of the schedule topic's queues. Thread-safe.

    Constructing it touches no file: call :meth:`load` to read ``delayOffset.json``.
    """

    FILE_NAME = "delayOffset.json"

    def __init__(
        self, config_dir: StrPath, clock: Clock, *, update_version_step: int = UPDATE_VERSION_STEP
    ) -> None:
        super().__init__(config_dir, clock)
        self._step = check_int(update_version_step, "update_version_step", 1)
        self._table: dict[int, int] = {}
        self._version = DataVersion.initial(clock)
        self._update_count = 0

    @property
    def data_version(self) -> DataVersion:
        with self._lock:
            return self._version

    def get(self, level: int) -> int:
        """The next offset to deliver for ``level``; 0 when the level has never run."""
        with self._lock:
            return self._table.get(level, 0)

    def offsets(self) -> dict[int, int]:
        """A copy of the table, ``{level: next offset}``."""
        with self._lock:
            return dict(self._table)

    def update(self, level: int, offset: int) -> None:
        """Record the next offset to deliver for ``level``.

        Raises:
            ValidationError: ``level`` below 1 or ``offset`` negative.
        """
        check_int(level, "level", 1, INT32_MAX)
        check_int(offset, "offset", 0, INT64_MAX)
        with self._lock:
            self._table[level] = offset
            self._update_count += 1
            if self._update_count % self._step == 0:
                self._version = self._version.next_version(self._clock)

    def clamp(self, level: int, min_offset: int, max_offset: int) -> int | None:
        """Pull ``level``'s offset into ``[min_offset, max_offset]`` (its queue's bounds).

        Returns:
            The offset after clamping, or None when the level has no offset (left absent).
        """
        with self._lock:
            current = self._table.get(level)
            if current is None:
                return None
            corrected = max(min_offset, min(current, max_offset))
            if corrected != current:
                log.warning(
                    "delay level %d offset %d is outside its queue [%d, %d]; corrected to %d",
                    level,
                    current,
                    min_offset,
                    max_offset,
                    corrected,
                )
                self._table[level] = corrected
            return corrected

    # -- ConfigFileManager steps -------------------------------------------------------------

    def _snapshot_locked(self) -> _DelayState:
        return _DelayState(dict(self._table), self._version)

    def _empty_state(self) -> _DelayState:
        return _DelayState({}, DataVersion.initial(self._clock))

    def _install_locked(self, state: _DelayState) -> None:
        self._table = state.table
        self._version = state.version

    def _prepare_import_locked(self, state: _DelayState) -> _DelayState:
        return _DelayState(state.table, self._version.next_version(self._clock))

    def _encode(self, state: _DelayState) -> str:
        return dumps_fastjson(
            Bean(dataVersion=state.version.to_json(), offsetTable=dict(state.table))
        )

    def _decode(self, raw: Any, strict: bool) -> _DelayState:
        doc = JsonObject(raw, "")
        version_obj = doc.get_object("dataVersion")
        version = (
            DataVersion.initial(self._clock)
            if version_obj is None
            else DataVersion.from_json(version_obj.raw)
        )
        table_obj = doc.get_object("offsetTable", required=strict)
        table: dict[int, int] = {}
        key_lo, value_lo = (1, 0) if strict else (INT32_MIN, INT64_MIN)
        for level, offset in table_obj.items() if table_obj is not None else ():
            assert table_obj is not None
            key = parse_int_key(level, "offsetTable", key_lo, INT32_MAX)
            table[key] = check_int(offset, table_obj.child_path(level), value_lo, INT64_MAX)
        return _DelayState(table, version)
