"""Consumers' filter expressions: ``consumerFilter.json`` (spec 8.6).

File layout::

    {
    →"filterDataByTopic":{
    →→"<topic>":{
    →→→"groupFilterData":{
    →→→→"<group>":{
    →→→→→"bloomFilterData":{"bitNum":64, "bitPos":[1,7,33]},   (bitPos is an int[]: inline)
    →→→→→"bornTime":T, "clientVersion":V, "consumerGroup":"<group>", "dead":false,
    →→→→→"deadTime":0, "expression":"a > 5", "expressionType":"SQL92", "topic":"<topic>"
    →→→→}
    →→→},
    →→→"topic":"<topic>"
    →→}
    →}
    }

``dead`` is derived (``deadTime >= bornTime``) and ignored on load. There is no ``dataVersion``.

Lifecycle (RocketMQ ``ConsumerFilterManager``): a filter is born when a consumer registers it and
dies when the group's last consumer leaves (``deadTime`` set). Writing the file drops filters
dead for 24 h or more, and topics left without filters. Loading treats ``deadTime`` 0 (written
while the consumer was alive) as dead 30 s ago, never before its birth: after a restart every
consumer must register again.

Crash behaviour: written atomically by :meth:`ConsumerFilterManager.persist` (RocketMQ: every
10 s and at shutdown). Filters are rebuilt by re-registration, so losing recent changes costs
nothing lasting. All public methods are thread-safe.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, replace
from typing import Any

from mqcore.clock import Clock
from mqcore.errors import ValidationError
from mqcore.metadata.config_file import ConfigFileManager
from mqcore.metadata.jsonfile import Bean, StrPath, dumps_fastjson
from mqcore.metadata.validation import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    JsonObject,
    check_choice,
    check_int,
    check_str,
    validate_group_name,
    validate_topic_name,
)

CLEAN_AFTER_DEATH_MS = 24 * 3600 * 1000  # filterDataCleanTimeSpan
DEAD_ON_LOAD_MS = 30 * 1000
EXPRESSION_TYPES = frozenset({"TAG", "SQL92"})


@dataclass(frozen=True, slots=True)
class BloomFilterData:
    """The bits a consumer's filter sets in a message's bloom bitmap."""

    bit_num: int
    bit_pos: tuple[int, ...] = ()

    def to_json(self) -> Bean:
        return Bean(bitNum=self.bit_num, bitPos=tuple(self.bit_pos))

    @classmethod
    def from_json(cls, raw: object, path: str) -> BloomFilterData:
        obj = JsonObject(raw, path)
        positions = obj.get_int_list("bitPos", INT32_MIN, INT32_MAX) or []
        return cls(obj.get_int("bitNum", 0, INT32_MIN, INT32_MAX), tuple(positions))


@dataclass(frozen=True, slots=True)
class ConsumerFilterData:
    """One group's filter on one topic. Immutable."""

    consumer_group: str
    topic: str
    expression: str | None = None
    expression_type: str | None = None
    born_time: int = 0
    dead_time: int = 0
    bloom_filter_data: BloomFilterData | None = None
    client_version: int = 0

    @property
    def is_dead(self) -> bool:
        return self.dead_time >= self.born_time

    def how_long_after_death(self, now_ms: int) -> int:
        """Milliseconds since death, or -1 while alive."""
        return now_ms - self.dead_time if self.is_dead else -1

    def to_json(self) -> Bean:
        bloom = self.bloom_filter_data
        return Bean(
            bloomFilterData=None if bloom is None else bloom.to_json(),
            bornTime=self.born_time,
            clientVersion=self.client_version,
            consumerGroup=self.consumer_group,
            dead=self.is_dead,
            deadTime=self.dead_time,
            expression=self.expression,
            expressionType=self.expression_type,
            topic=self.topic,
        )

    @classmethod
    def from_json(
        cls, raw: object, path: str, topic: str | None = None, group: str | None = None
    ) -> ConsumerFilterData:
        """Read the bean (types only; ``dead`` is ignored). ``topic``/``group`` stand in for
        missing ``topic``/``consumerGroup``."""
        obj = JsonObject(raw, path)
        bloom = obj.get_object("bloomFilterData")
        consumer_group = obj.get_opt_str("consumerGroup") or group
        topic_name = obj.get_opt_str("topic") or topic
        if consumer_group is None or topic_name is None:
            obj.get_str("consumerGroup" if consumer_group is None else "topic")  # raises
        assert consumer_group is not None and topic_name is not None
        return cls(
            consumer_group=consumer_group,
            topic=topic_name,
            expression=obj.get_opt_str("expression"),
            expression_type=obj.get_opt_str("expressionType"),
            born_time=obj.get_int("bornTime", 0),
            dead_time=obj.get_int("deadTime", 0),
            bloom_filter_data=None
            if bloom is None
            else BloomFilterData.from_json(bloom.raw, bloom.path),
            client_version=obj.get_int("clientVersion", 0),
        )

    def validate(self) -> None:
        """Check the rules for incoming filters.

        Raises:
            ValidationError: a bad name, expression type or negative time.
        """
        validate_group_name(self.consumer_group, "consumer_group")
        validate_topic_name(self.topic, "topic")
        if self.expression_type is not None:
            check_choice(self.expression_type, "expression_type", EXPRESSION_TYPES)
        if self.expression is not None:
            check_str(self.expression, "expression")
        for name in ("born_time", "dead_time", "client_version"):
            check_int(getattr(self, name), name, 0, INT64_MAX)
        if self.bloom_filter_data is not None:
            check_int(self.bloom_filter_data.bit_num, "bloom_filter_data.bit_num", 0, INT32_MAX)
            for i, pos in enumerate(self.bloom_filter_data.bit_pos):
                check_int(pos, f"bloom_filter_data.bit_pos[{i}]", 0, INT32_MAX)


_Table = dict[str, dict[str, ConsumerFilterData]]


class ConsumerFilterManager(ConfigFileManager[_Table]):
    """``topic → group → ConsumerFilterData`` and ``consumerFilter.json``. Thread-safe.

    Constructing it touches no file: call :meth:`load` to read ``consumerFilter.json``.
    """

    FILE_NAME = "consumerFilter.json"

    def __init__(
        self, config_dir: StrPath, clock: Clock, *, clean_after_ms: int = CLEAN_AFTER_DEATH_MS
    ) -> None:
        super().__init__(config_dir, clock)
        self._clean_after_ms = clean_after_ms
        self._table: _Table = {}

    def get(self, topic: str, group: str) -> ConsumerFilterData | None:
        with self._lock:
            return self._table.get(topic, {}).get(group)

    def list_topic(self, topic: str) -> builtins.list[ConsumerFilterData]:
        """Every filter registered on ``topic``, live or dead."""
        with self._lock:
            return builtins.list(self._table.get(topic, {}).values())

    def topics(self) -> builtins.list[str]:
        with self._lock:
            return builtins.list(self._table)

    def register(self, data: ConsumerFilterData) -> None:
        """Add or replace the filter of ``data.consumer_group`` on ``data.topic``.

        Raises:
            ValidationError: a rule is broken.
        """
        data.validate()
        with self._lock:
            self._table.setdefault(data.topic, {})[data.consumer_group] = data

    def unregister(self, group: str) -> int:
        """Mark every live filter of ``group`` dead now (its last consumer left).

        Returns:
            How many filters died.
        """
        now = self._clock.now_ms()
        count = 0
        with self._lock:
            for groups in self._table.values():
                data = groups.get(group)
                if data is not None and not data.is_dead:
                    groups[group] = replace(data, dead_time=now)
                    count += 1
        return count

    def remove(self, topic: str, group: str) -> bool:
        """Drop one filter at once. Returns False if there was none."""
        with self._lock:
            groups = self._table.get(topic)
            if groups is None or groups.pop(group, None) is None:
                return False
            if not groups:
                del self._table[topic]
            return True

    # -- ConfigFileManager steps -------------------------------------------------------------

    def _snapshot_locked(self) -> _Table:
        # Writing cleans first, in memory too, as ConsumerFilterManager.encode does.
        now = self._clock.now_ms()
        for topic in builtins.list(self._table):
            groups = self._table[topic]
            for group in builtins.list(groups):
                if groups[group].how_long_after_death(now) >= self._clean_after_ms:
                    del groups[group]
            if not groups:
                del self._table[topic]
        return {topic: dict(groups) for topic, groups in self._table.items()}

    def _empty_state(self) -> _Table:
        return {}

    def _install_locked(self, state: _Table) -> None:
        self._table = state

    def _encode(self, state: _Table) -> str:
        by_topic = {
            topic: Bean(
                groupFilterData={group: data.to_json() for group, data in groups.items()},
                topic=topic,
            )
            for topic, groups in state.items()
        }
        return dumps_fastjson(Bean(filterDataByTopic=by_topic))

    def _decode(self, raw: Any, strict: bool) -> _Table:
        doc = JsonObject(raw, "")
        by_topic = doc.get_object("filterDataByTopic", required=strict)
        dead_on_load = self._clock.now_ms() - DEAD_ON_LOAD_MS
        table: _Table = {}
        for topic, entry in by_topic.items() if by_topic is not None else ():
            assert by_topic is not None
            topic_path = by_topic.child_path(topic)
            topic_name = check_str(topic, f"{topic_path} key")
            groups_obj = JsonObject(entry, topic_path).get_object("groupFilterData")
            groups: dict[str, ConsumerFilterData] = {}
            for group, value in groups_obj.items() if groups_obj is not None else ():
                assert groups_obj is not None
                path = groups_obj.child_path(group)
                group_name = check_str(group, f"{path} key")
                data = ConsumerFilterData.from_json(value, path, topic_name, group_name)
                if strict:
                    _validate_entry(data, path)
                if data.dead_time == 0:
                    data = replace(data, dead_time=max(dead_on_load, data.born_time))
                groups[group_name] = data
            table[topic_name] = groups
        return table


def _validate_entry(data: ConsumerFilterData, path: str) -> None:
    try:
        data.validate()
    except ValidationError as exc:
        raise ValidationError(f"{path}.{exc.field}", exc.rule, f"{path}: {exc}") from exc
