"""Topics: ``TopicConfig`` and ``topics.json`` (spec 8.2).

File layout (fastjson pretty format, see :mod:`mqcore.metadata.jsonfile`)::

    {
        "dataVersion":{"counter":N, "stateVersion":0, "timestamp":T},
        "topicConfigTable":{
            "<topic>":{"attributes":{}, "order":false, "perm":6, "readQueueNums":16,
                       "topicFilterType":"SINGLE_TAG", "topicName":"<topic>",
                       "topicSysFlag":0, "writeQueueNums":16},
            ...
        }
    }

Legacy 4.x files have no ``attributes`` and no ``stateVersion``; both load as defaults.

Invariants:

* The system topics of spec 8.2 are always in the table. They are created in memory at
  construction; a loaded file overrides their settings and the ones it lacks are added back.
  They cannot be deleted, and :meth:`TopicConfigManager.create` refuses their names.
* Every change bumps ``dataVersion`` and is written to disk *before* it is visible in memory.
  If the write fails the change did not happen.
* Rules (names 8.7, queue counts, perm) are checked on what comes in, not on files at load
  (see :mod:`mqcore.metadata.validation`). Queue counts must be 1..:data:`MAX_QUEUE_NUMS`:
  RocketMQ sets no upper bound, but every queue is a consume-queue directory and 1024 is the
  largest count RocketMQ itself creates (``BenchmarkTest``).

Crash behaviour: that of :func:`~mqcore.metadata.jsonfile.atomic_write`.
"""

from __future__ import annotations

import builtins
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from mqcore.clock import Clock
from mqcore.errors import ConflictError, NotFoundError, ValidationError
from mqcore.metadata.config_file import ConfigFileManager
from mqcore.metadata.data_version import DataVersion
from mqcore.metadata.jsonfile import Bean, StrPath, dumps_fastjson
from mqcore.metadata.named_table import decode_named_table, decode_version
from mqcore.metadata.validation import (
    DLQ_TOPIC_PREFIX,
    INT32_MAX,
    INT32_MIN,
    RETRY_TOPIC_PREFIX,
    JsonObject,
    check_bool,
    check_choice,
    check_int,
    check_str_map,
    validate_group_name,
    validate_topic_name,
)

# Perm bits (PermName)
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
PERM_MAX = PERM_READ | PERM_WRITE | PERM_INHERIT  # 7; PRIORITY is never stored on a topic

# topicSysFlag bits (TopicSysFlag)
TOPIC_SYS_FLAG_UNIT = 1
TOPIC_SYS_FLAG_UNIT_SUB = 2

MAX_QUEUE_NUMS = 1024
TOPIC_FILTER_TYPES = frozenset({"SINGLE_TAG", "MULTI_TAG"})

# Known topic attributes and their allowed values (TopicAttributes); other keys pass through.
ATTRIBUTE_CHOICES: dict[str, frozenset[str]] = {
    "queue.type": frozenset({"SimpleCQ", "BatchCQ"}),
    "cleanup.policy": frozenset({"DELETE", "COMPACTION"}),
    "message.type": frozenset({"UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"}),
}

# System topic names (TopicValidator, spec 8.2)
AUTO_CREATE_TOPIC = "TBW102"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT_TOPIC = "OFFSET_MOVED_EVENT"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
TIMER_TOPIC = "rmq_sys_wheel_timer"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
RESERVED_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC,
        SELF_TEST_TOPIC,
        BENCHMARK_TOPIC,
        OFFSET_MOVED_EVENT_TOPIC,
        SCHEDULE_TOPIC,
        TRACE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        CHECKPOINT_TOPIC,
    }
)
# Topics clients may not send to (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET).
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT_TOPIC,
    }
)


def is_readable(perm: int) -> bool:
    return perm & PERM_READ == PERM_READ


def is_writeable(perm: int) -> bool:
    return perm & PERM_WRITE == PERM_WRITE


def is_inherited(perm: int) -> bool:
    return perm & PERM_INHERIT == PERM_INHERIT


def retry_topic_name(group: str) -> str:
    """``%RETRY%{group}``, where a group's redelivered messages go (spec 9)."""
    return RETRY_TOPIC_PREFIX + group


def dlq_topic_name(group: str) -> str:
    """``%DLQ%{group}``, where messages go after the group's last retry (spec 9)."""
    return DLQ_TOPIC_PREFIX + group


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One topic's settings. Immutable (``attributes`` too, by convention: the manager copies
    what it is given); change a topic with :meth:`TopicConfigManager.update`."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> Bean:
        """The bean as RocketMQ writes it (camelCase keys)."""
        return Bean(
            attributes=dict(self.attributes),
            order=self.order,
            perm=self.perm,
            readQueueNums=self.read_queue_nums,
            topicFilterType=self.topic_filter_type,
            topicName=self.topic_name,
            topicSysFlag=self.topic_sys_flag,
            writeQueueNums=self.write_queue_nums,
        )

    @classmethod
    def from_json(
        cls, raw: object, path: str = "topicConfig", name: str | None = None
    ) -> TopicConfig:
        """Read the bean, checking types only (rules: :meth:`validate`).

        Args:
            raw: the parsed object.
            path: JSON path named in errors.
            name: the table key; used when ``topicName`` is absent.

        Raises:
            ValidationError: a field has the wrong type, or ``topicName`` is missing with no
                ``name`` to stand in.
        """
        obj = JsonObject(raw, path)
        topic_name = obj.get_opt_str("topicName") or name
        if topic_name is None:
            obj.get_str("topicName")  # raises "required"
        assert topic_name is not None
        return cls(
            topic_name=topic_name,
            read_queue_nums=obj.get_int("readQueueNums", 16, INT32_MIN, INT32_MAX),
            write_queue_nums=obj.get_int("writeQueueNums", 16, INT32_MIN, INT32_MAX),
            perm=obj.get_int("perm", PERM_READ | PERM_WRITE, INT32_MIN, INT32_MAX),
            topic_filter_type=obj.get_opt_str("topicFilterType") or "SINGLE_TAG",
            topic_sys_flag=obj.get_int("topicSysFlag", 0, INT32_MIN, INT32_MAX),
            order=obj.get_bool("order", False),
            attributes=obj.get_str_map("attributes"),
        )

    def validate(self, only: Collection[str] | None = None) -> None:
        """Check the rules for incoming configs; ``only`` limits the check to some fields.

        Raises:
            ValidationError: ``field`` is the Python field name, ``rule`` the rule broken.
        """

        def wanted(name: str) -> bool:
            return only is None or name in only

        if wanted("topic_name"):
            validate_topic_name(self.topic_name)
        for name in ("read_queue_nums", "write_queue_nums"):
            if wanted(name):
                check_int(getattr(self, name), name, 1, MAX_QUEUE_NUMS)
        if wanted("perm"):
            check_int(self.perm, "perm", 0, PERM_MAX)
        if wanted("topic_filter_type"):
            check_choice(self.topic_filter_type, "topic_filter_type", TOPIC_FILTER_TYPES)
        if wanted("topic_sys_flag"):
            check_int(self.topic_sys_flag, "topic_sys_flag", 0, 3)
        if wanted("order"):
            check_bool(self.order, "order")
        if wanted("attributes"):
            attributes = check_str_map(self.attributes, "attributes")
            for key, choices in ATTRIBUTE_CHOICES.items():
                if key in attributes:
                    check_choice(attributes[key], f"attributes.{key}", choices)
            if "reserve.time" in attributes:
                _check_reserve_time(attributes["reserve.time"])


def _check_reserve_time(value: str) -> None:
    try:
        hours = int(value)
    except ValueError:
        hours = -2
    if hours < -1:
        raise ValidationError(
            "attributes.reserve.time",
            "range",
            f"attributes.reserve.time must be a whole number of hours, -1 or more (got {value!r})",
        )


_UPDATABLE_FIELDS = frozenset(f.name for f in fields(TopicConfig)) - {"topic_name"}


@dataclass(frozen=True, slots=True)
class _TopicsState:
    table: dict[str, TopicConfig]
    version: DataVersion


class TopicConfigManager(ConfigFileManager[_TopicsState]):
    """The topic table and ``topics.json``. All public methods are thread-safe.

    Constructing it touches no file: call :meth:`load` to read ``topics.json``.
    """

    FILE_NAME = "topics.json"

    def __init__(
        self,
        config_dir: StrPath,
        clock: Clock,
        *,
        cluster_name: str = "DefaultCluster",
        broker_name: str = "broker-a",
        auto_create_topic_enable: bool = True,
        default_topic_queue_nums: int = 8,
        cluster_topic_enable: bool = True,
        broker_topic_enable: bool = True,
        trace_topic_enable: bool = False,
        timer_wheel_enable: bool = True,
        revive_queue_num: int = 8,
    ) -> None:
        super().__init__(config_dir, clock)
        validate_topic_name(cluster_name, "cluster_name")
        validate_topic_name(broker_name, "broker_name")
        self._auto_create_topic_enable = auto_create_topic_enable
        self._default_topic_queue_nums = default_topic_queue_nums
        self._system_defaults = _system_topics(
            cluster_name,
            broker_name,
            auto_create=auto_create_topic_enable,
            default_queue_nums=default_topic_queue_nums,
            cluster_topic=cluster_topic_enable,
            broker_topic=broker_topic_enable,
            trace_topic=trace_topic_enable,
            timer_wheel=timer_wheel_enable,
            revive_queue_num=revive_queue_num,
        )
        self._system_names = frozenset(self._system_defaults) | {
            cluster_name,
            broker_name,
            f"{cluster_name}_REPLY_TOPIC",
        }
        self._table: dict[str, TopicConfig] = {}
        self._version = DataVersion.initial(clock)
        self._install_locked(self._empty_state())

    # -- queries ------------------------------------------------------------------------------

    @property
    def data_version(self) -> DataVersion:
        with self._lock:
            return self._version

    @property
    def default_queue_nums(self) -> int:
        """Queue count of a topic created with no count given (``defaultTopicQueueNums``)."""
        return self._default_topic_queue_nums

    def is_system_topic(self, name: str) -> bool:
        """True for the broker's own topics (spec 8.2): they cannot be deleted or created."""
        return (
            name in self._system_names
            or name in RESERVED_TOPICS
            or name.startswith(SYSTEM_TOPIC_PREFIX)
        )

    def get(self, name: str) -> TopicConfig | None:
        """The topic's config, or None if there is no such topic."""
        with self._lock:
            return self._table.get(name)

    def require(self, name: str) -> TopicConfig:
        """The topic's config. Raises :class:`NotFoundError` if there is no such topic."""
        config = self.get(name)
        if config is None:
            raise NotFoundError("topic_name", "not_found", f"topic {name!r} does not exist")
        return config

    def list(self) -> builtins.list[TopicConfig]:
        """Every topic, in table order (file order, then topics added since)."""
        with self._lock:
            return builtins.list(self._table.values())

    # -- changes ------------------------------------------------------------------------------

    def create(self, config: TopicConfig) -> TopicConfig:
        """Add a topic and persist.

        Raises:
            ValidationError: a rule is broken, or the name belongs to a system topic.
            ConflictError: the topic exists already.
        """
        config = replace(config, attributes=dict(config.attributes))
        config.validate()
        self._refuse_system(config.topic_name, "created")
        with self._changing():
            if config.topic_name in self._table:
                raise ConflictError(f"topic {config.topic_name!r} already exists")
            self._commit_locked({**self._table, config.topic_name: config})
        return config

    def update(self, name: str, **changes: Any) -> TopicConfig:
        """Change some fields of a topic (Python field names) and persist.

        Raises:
            NotFoundError: no such topic.
            ValidationError: an unknown field, or a new value breaks a rule.
        """
        for key in changes:
            if key not in _UPDATABLE_FIELDS:
                raise ValidationError(key, "unknown_field", f"{key!r} is not a topic setting")
        if "attributes" in changes:
            changes["attributes"] = check_str_map(changes["attributes"], "attributes")
        with self._changing():
            updated = replace(self.require(name), **changes)
            updated.validate(only=changes.keys())
            self._commit_locked({**self._table, name: updated})
        return updated

    def delete(self, name: str) -> TopicConfig:
        """Remove a topic and persist. Returns the removed config.

        Raises:
            ValidationError: rule ``system_topic`` for the broker's own topics.
            NotFoundError: no such topic.
        """
        self._refuse_system(name, "deleted")
        with self._changing():
            removed = self.require(name)
            table = dict(self._table)
            del table[name]
            self._commit_locked(table)
        return removed

    def create_retry_topic(self, group: str, queue_nums: int = 1) -> TopicConfig:
        """``%RETRY%{group}`` with ``queue_nums`` queues and perm RW; an existing one is kept."""
        validate_group_name(group, "group")
        check_int(queue_nums, "queue_nums", 1, MAX_QUEUE_NUMS)
        return self._ensure(TopicConfig(retry_topic_name(group), queue_nums, queue_nums))

    def create_dlq_topic(self, group: str) -> TopicConfig:
        """``%DLQ%{group}`` with one queue and perm RW; an existing one is kept."""
        validate_group_name(group, "group")
        return self._ensure(TopicConfig(dlq_topic_name(group), 1, 1))

    def auto_create_from_default(
        self,
        name: str,
        queue_nums: int,
        *,
        default_topic: str = AUTO_CREATE_TOPIC,
        topic_sys_flag: int = 0,
    ) -> TopicConfig | None:
        """Create a topic on first send from its default topic (spec 8.2, 11 step 4).

        Queue count = min(``queue_nums``, the default's write queues), at least 1 (RocketMQ
        allows 0); perm = the default's without INHERIT; filter type copied.

        Returns:
            The topic (an existing one unchanged), or None when auto-creation is not allowed:
            the default topic is missing or lacks INHERIT, or it is TBW102 and auto-create is
            off. The send path answers TOPIC_NOT_EXIST then.

        Raises:
            ValidationError: ``name`` is not a valid topic name, or is a system topic's.
        """
        validate_topic_name(name)
        check_int(queue_nums, "queue_nums", INT32_MIN, INT32_MAX)
        existing = self.get(name)
        if existing is not None:  # the common case takes no write lock
            return existing
        self._refuse_system(name, "auto-created")
        with self._changing():
            existing = self._table.get(name)
            if existing is not None:
                return existing
            default = self._table.get(default_topic)
            if default is None or not is_inherited(default.perm):
                return None
            if default_topic == AUTO_CREATE_TOPIC and not self._auto_create_topic_enable:
                return None
            nums = max(1, min(queue_nums, default.write_queue_nums))
            config = TopicConfig(
                name,
                nums,
                nums,
                default.perm & ~PERM_INHERIT,
                default.topic_filter_type,
                topic_sys_flag,
            )
            self._commit_locked({**self._table, name: config})
        return config

    def restore(self, configs: Iterable[TopicConfig]) -> None:
        """Put topics rebuilt from the store's data (``mqcore.metadata.reconcile``) into the
        table as one change, replacing entries of the same name. Recovery only: no rule is
        checked, and the topics are installed even if the write fails.

        Raises:
            OSError: the write failed (the topics are in memory all the same).
        """
        with self._changing():
            table = {**self._table, **{c.topic_name: c for c in configs}}
            self._restore_locked(_TopicsState(table, self._version.next_version(self._clock)))

    def names_in(self, state: _TopicsState) -> frozenset[str]:
        return frozenset(state.table)

    # -- internals ----------------------------------------------------------------------------

    def _refuse_system(self, name: str, action: str) -> None:
        if self.is_system_topic(name):
            raise ValidationError(
                "topic_name",
                "system_topic",
                f"{name!r} is a system topic of the broker and cannot be {action}",
            )

    def _ensure(self, config: TopicConfig) -> TopicConfig:
        with self._changing():
            existing = self._table.get(config.topic_name)
            if existing is not None:
                return existing
            self._commit_locked({**self._table, config.topic_name: config})
        return config

    def _commit_locked(self, table: dict[str, TopicConfig]) -> None:
        state = _TopicsState(table, self._version.next_version(self._clock))
        self._write_locked(state)
        self._install_locked(state)

    def _with_system_topics(self, table: dict[str, TopicConfig]) -> dict[str, TopicConfig]:
        merged = dict(table)
        for name, config in self._system_defaults.items():
            merged.setdefault(name, config)
        return merged

    def _snapshot_locked(self) -> _TopicsState:
        return _TopicsState(dict(self._table), self._version)

    def _empty_state(self) -> _TopicsState:
        return _TopicsState(dict(self._system_defaults), DataVersion.initial(self._clock))

    def _install_locked(self, state: _TopicsState) -> None:
        self._table = state.table
        self._version = state.version

    def _prepare_import_locked(self, state: _TopicsState) -> _TopicsState:
        return _TopicsState(state.table, self._version.next_version(self._clock))

    def _encode(self, state: _TopicsState) -> str:
        return dumps_fastjson(
            Bean(
                dataVersion=state.version.to_json(),
                topicConfigTable={name: cfg.to_json() for name, cfg in state.table.items()},
            )
        )

    def _decode(self, raw: Any, strict: bool) -> _TopicsState:
        doc = JsonObject(raw, "")
        table = decode_named_table(
            doc,
            "topicConfigTable",
            strict,
            lambda value, path, key: TopicConfig.from_json(value, path, name=key),
            lambda config: config.topic_name,
            "topicName",
            "topic",
        )
        return _TopicsState(self._with_system_topics(table), decode_version(doc, self._clock))


def _system_topics(
    cluster: str,
    broker: str,
    *,
    auto_create: bool,
    default_queue_nums: int,
    cluster_topic: bool,
    broker_topic: bool,
    trace_topic: bool,
    timer_wheel: bool,
    revive_queue_num: int,
) -> dict[str, TopicConfig]:
    """The topics ``TopicConfigManager`` creates at broker start (spec 8.2), in its order."""
    rw = PERM_READ | PERM_WRITE
    topics = [TopicConfig(SELF_TEST_TOPIC, 1, 1, rw)]
    if auto_create:
        n = default_queue_nums
        topics.append(TopicConfig(AUTO_CREATE_TOPIC, n, n, rw | PERM_INHERIT))
    topics += [
        TopicConfig(BENCHMARK_TOPIC, 1024, 1024, rw),
        TopicConfig(cluster, 16, 16, (rw if cluster_topic else 0) | PERM_INHERIT),
        TopicConfig(broker, 1, 1, (rw if broker_topic else 0) | PERM_INHERIT),
        TopicConfig(OFFSET_MOVED_EVENT_TOPIC, 1, 1, rw),
        TopicConfig(SCHEDULE_TOPIC, 18, 18, rw),
    ]
    if trace_topic:
        topics.append(TopicConfig(TRACE_TOPIC, 1, 1, rw))
    topics += [
        TopicConfig(f"{cluster}_REPLY_TOPIC", 1, 1, rw),
        TopicConfig(f"rmq_sys_REVIVE_LOG_{cluster}", revive_queue_num, revive_queue_num, rw),
        TopicConfig(f"rmq_sys_SYNC_BROKER_MEMBER_{broker}", 1, 1, PERM_INHERIT),
        TopicConfig(TRANS_HALF_TOPIC, 1, 1, rw),
        TopicConfig(TRANS_OP_HALF_TOPIC, 1, 1, rw),
    ]
    if timer_wheel:
        topics.append(TopicConfig(TIMER_TOPIC, 1, 1, rw))
    return {t.topic_name: t for t in topics}
