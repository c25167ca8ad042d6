"""Committed consumer offsets: ``consumerOffset.json`` (spec 8.4).

File layout (→ = one TAB; note the bare integer keys, and that fastjson puts an int-keyed map
on the line of its ``{``)::

    {
    →"dataVersion":{...},
    →"groupTopicMap":{
    →→"<group>":["<topic>","<topic>"]
    →},
    →"offsetTable":{
    →→"<topic>@<group>":{0:250,1:251
    →→}
    →}
    }

The stored value is the **next** queue offset the group will consume. ``groupTopicMap`` is
derived from ``offsetTable`` (5.x writes it, loading ignores it; 4.x files lack it and
``dataVersion``). Keys that do not split into exactly one topic and one group at ``@`` are kept
and written back, but no query sees them (RocketMQ does the same).

Invariants and crash behaviour: commits change memory only. :meth:`persist` writes the whole
table atomically (RocketMQ does so every ``flushConsumerOffsetInterval`` = 5 s and at shutdown;
the caller owns that timer), so a crash loses at most the commits since the last persist: the
consumers then re-read those messages (at-least-once), never skip any. ``dataVersion`` is bumped
on every 500th commit (``consumerOffsetUpdateVersionStep``), as in RocketMQ, and on removals.

Thread-safety: every public method is thread-safe; commits from many threads serialise on one
lock held for a dict update only (microseconds), and a persist holds it only to copy the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mqcore.clock import Clock
from mqcore.errors import ValidationError
from mqcore.metadata.config_file import ConfigFileManager
from mqcore.metadata.data_version import DataVersion
from mqcore.metadata.jsonfile import Bean, StrPath, dumps_fastjson
from mqcore.metadata.validation import (
    INT64_MAX,
    JsonObject,
    check_int,
    check_str,
    parse_int_key,
    validate_group_name,
    validate_topic_name,
)

TOPIC_GROUP_SEPARATOR = "@"
UPDATE_VERSION_STEP = 500  # consumerOffsetUpdateVersionStep


def offset_key(topic: str, group: str) -> str:
    """The ``offsetTable`` key, ``topic@group``."""
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def split_offset_key(key: str) -> tuple[str, str] | None:
    """``(topic, group)`` from a key, or None if the key is malformed."""
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    return parts[0], parts[1]


@dataclass(frozen=True, slots=True)
class _OffsetsState:
    table: dict[str, dict[int, int]]
    version: DataVersion


class ConsumerOffsetManager(ConfigFileManager[_OffsetsState]):
    """``topic@group → {queue_id: next offset}``. Thread-safe.

    Constructing it touches no file: call :meth:`load` to read ``consumerOffset.json``.
    """

    FILE_NAME = "consumerOffset.json"

    def __init__(
        self, config_dir: StrPath, clock: Clock, *, update_version_step: int = UPDATE_VERSION_STEP
    ) -> None:
        super().__init__(config_dir, clock)
        self._step = check_int(update_version_step, "update_version_step", 1)
        self._table: dict[str, dict[int, int]] = {}
        self._version = DataVersion.initial(clock)
        self._commit_count = 0
        self._last_change_ms = 0

    @property
    def data_version(self) -> DataVersion:
        with self._lock:
            return self._version

    @property
    def activity(self) -> tuple[int, int]:
        """``(commits since this process loaded the table, epoch ms of the last change or
        0)``. The ``dataVersion`` moves only every ``update_version_step`` commits (500, as
        RocketMQ writes it), so it cannot tell an operator when offsets last moved; this can."""
        with self._lock:
            return self._commit_count, max(self._last_change_ms, self._version.timestamp)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that ``group`` will next consume ``offset`` in ``topic``'s queue ``queue_id``.

        An offset lower than the stored one is accepted (a reset, or a consumer rewinding).

        Raises:
            ValidationError: a bad name, a negative queue id or offset.
        """
        validate_group_name(group, "group")
        validate_topic_name(topic, "topic")
        check_int(queue_id, "queue_id", 0, 2**31 - 1)
        check_int(offset, "offset", 0, INT64_MAX)
        key = offset_key(topic, group)
        now = self._clock.now_ms()
        with self._lock:
            queues = self._table.get(key)
            if queues is None:
                self._table[key] = {queue_id: offset}
            else:
                queues[queue_id] = offset
            self._commit_count += 1
            self._last_change_ms = now
            if self._commit_count % self._step == 0:
                self._version = self._version.next_version(self._clock)

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed next offset, or None if the group never committed on that queue."""
        with self._lock:
            queues = self._table.get(offset_key(topic, group))
            return None if queues is None else queues.get(queue_id)

    def offsets_for(self, group: str, topic: str) -> dict[int, int]:
        """A copy of ``{queue_id: next offset}`` for the pair (empty when none)."""
        with self._lock:
            return dict(self._table.get(offset_key(topic, group), {}))

    def committed_queues(self) -> dict[tuple[str, str], frozenset[int]]:
        """``(topic, group) → queue ids`` with a committed offset (malformed keys left out)."""
        with self._lock:
            items = [
                (split_offset_key(key), frozenset(queues)) for key, queues in self._table.items()
            ]
        return {pair: queues for pair, queues in items if pair is not None}

    def groups_of_topic(self, topic: str) -> list[str]:
        """Groups with offsets on ``topic``, sorted."""
        with self._lock:
            pairs = [split_offset_key(key) for key in self._table]
        return sorted({p[1] for p in pairs if p is not None and p[0] == topic})

    def topics_of_group(self, group: str) -> list[str]:
        """Topics on which ``group`` has offsets, sorted."""
        with self._lock:
            pairs = [split_offset_key(key) for key in self._table]
        return sorted({p[0] for p in pairs if p is not None and p[1] == group})

    def remove_group(self, group: str) -> int:
        """Forget every offset of ``group``. Returns the number of topics dropped."""
        return self._remove(lambda topic, g: g == group)

    def remove_topic(self, topic: str) -> int:
        """Forget every offset on ``topic``. Returns the number of groups dropped."""
        return self._remove(lambda t, group: t == topic)

    def _remove(self, match: Callable[[str, str], bool]) -> int:
        with self._lock:
            doomed = [
                key
                for key in self._table
                if (pair := split_offset_key(key)) is not None and match(*pair)
            ]
            for key in doomed:
                del self._table[key]
            if doomed:
                self._version = self._version.next_version(self._clock)
            return len(doomed)

    # -- ConfigFileManager steps -------------------------------------------------------------

    def _snapshot_locked(self) -> _OffsetsState:
        return _OffsetsState({k: dict(v) for k, v in self._table.items()}, self._version)

    def _empty_state(self) -> _OffsetsState:
        return _OffsetsState({}, DataVersion.initial(self._clock))

    def _install_locked(self, state: _OffsetsState) -> None:
        self._table = state.table
        self._version = state.version

    def _prepare_import_locked(self, state: _OffsetsState) -> _OffsetsState:
        return _OffsetsState(state.table, self._version.next_version(self._clock))

    def _encode(self, state: _OffsetsState) -> str:
        group_topics: dict[str, tuple[str, ...]] = {}
        for key in state.table:
            pair = split_offset_key(key)
            if pair is not None and pair[0] not in group_topics.get(pair[1], ()):
                group_topics[pair[1]] = (*group_topics.get(pair[1], ()), pair[0])
        return dumps_fastjson(
            Bean(
                dataVersion=state.version.to_json(),
                groupTopicMap=group_topics,  # a Java HashSet per group: written inline
                offsetTable=state.table,
            )
        )

    def _decode(self, raw: Any, strict: bool) -> _OffsetsState:
        doc = JsonObject(raw, "")
        version_obj = doc.get_object("dataVersion")
        version = (
            DataVersion.initial(self._clock)
            if version_obj is None
            else DataVersion.from_json(version_obj.raw)
        )
        return _OffsetsState(decode_offset_table(doc, "offsetTable", strict), version)


def decode_offset_table(doc: JsonObject, key: str, strict: bool) -> dict[str, dict[int, int]]:
    """``{"topic@group": {queueId: offset}}`` from ``doc[key]``; empty when absent.

    With ``strict``, each key must be ``topic@group`` with valid names and offsets must be
    non-negative.
    """
    table_obj = doc.get_object(key, required=strict)
    table: dict[str, dict[int, int]] = {}
    for topic_at_group, queues in table_obj.items() if table_obj is not None else ():
        assert table_obj is not None
        path = table_obj.child_path(topic_at_group)
        name = check_str(topic_at_group, f"{path} key")
        if strict:
            pair = split_offset_key(name)
            if pair is None:
                raise ValidationError(
                    path, "pattern", f"{path}: offset keys must be 'topic@group' (got {name!r})"
                )
            validate_topic_name(pair[0], f"{path} topic")
            validate_group_name(pair[1], f"{path} group")
        queues_obj = JsonObject(queues, path)
        lo = 0 if strict else -(2**63)
        table[name] = {
            parse_int_key(queue_id, path, 0 if strict else -(2**31)): check_int(
                offset, f"{path}.{queue_id}", lo, INT64_MAX
            )
            for queue_id, offset in queues_obj.items()
        }
    return table
