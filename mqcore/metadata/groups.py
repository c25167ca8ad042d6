"""Consumer groups: ``SubscriptionGroupConfig`` and ``subscriptionGroup.json`` (spec 8.3).

File layout::

    {
        "dataVersion":{...},
        "forbiddenTable":{"<group>":{"<topic>":<int bitmask>}},
        "subscriptionGroupTable":{"<group>":SubscriptionGroupConfig, ...}
    }

``SubscriptionGroupConfig`` is a bean (keys sorted). Its ``groupRetryPolicy`` is a nested bean,
``{"type":"CUSTOMIZED"}`` by default, optionally with ``customizedRetryPolicy: {"next": [ms...]}``
or ``exponentialRetryPolicy: {"initial", "max", "multiplier"}``; the ``next`` array is a Java
``long[]`` and is written inline. ``subscriptionDataSet`` (a Java ``Set`` of
``{expression, expressionType, topic, version}`` beans) is left out when null. Legacy 4.x files
have no ``forbiddenTable``, ``groupRetryPolicy`` or ``attributes``.

Invariants: as for topics (:mod:`mqcore.metadata.topics`): the system groups are always
present and cannot be deleted; every change bumps ``dataVersion`` and reaches disk before it is
visible; rules are enforced on input, only types on load. ``forbiddenTable`` round-trips as it is.
"""

from __future__ import annotations

import builtins
import copy
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from mqcore.clock import Clock
from mqcore.errors import ConflictError, NotFoundError, ValidationError
from mqcore.metadata.config_file import ConfigFileManager
from mqcore.metadata.data_version import DataVersion
from mqcore.metadata.jsonfile import Bean, StrPath, dumps_fastjson
from mqcore.metadata.named_table import decode_named_table, decode_version
from mqcore.metadata.topics import MAX_QUEUE_NUMS
from mqcore.metadata.validation import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    JsonObject,
    check_bool,
    check_choice,
    check_int,
    check_str,
    check_str_map,
    validate_group_name,
    validate_topic_name,
)

SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_RMQ_SYS_TRANS",
)
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"  # MixAll.isSysConsumerGroup
RETRY_POLICY_TYPES = frozenset({"CUSTOMIZED", "EXPONENTIAL"})
EXPRESSION_TYPES = frozenset({"TAG", "SQL92"})

_INT_FIELDS: dict[str, tuple[int, int]] = {  # field -> allowed range for input
    "retry_queue_nums": (0, MAX_QUEUE_NUMS),  # 0: retried messages are dropped (RocketMQ)
    "retry_max_times": (0, INT32_MAX),
    "broker_id": (0, INT64_MAX),
    "which_broker_when_consume_slowly": (0, INT64_MAX),
    "group_sys_flag": (0, INT32_MAX),
    "consume_timeout_minute": (0, INT64_MAX),
}
_BOOL_FIELDS = (
    "consume_enable",
    "consume_from_min_enable",
    "consume_broadcast_enable",
    "consume_message_orderly",
    "notify_consumer_ids_changed_enable",
)


def _default_retry_policy() -> dict[str, Any]:
    return {"type": "CUSTOMIZED"}


def _as_beans(value: Any) -> Any:
    """Plain JSON → the writer's model: objects become beans, lists inline arrays."""
    if isinstance(value, dict):
        return Bean({str(k): _as_beans(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_as_beans(v) for v in value)
    return value


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """One consumer group's settings, with RocketMQ's defaults.

    Immutable: treat the nested dicts as read-only too (the managers copy what they are given).
    """

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    group_retry_policy: dict[str, Any] = field(default_factory=_default_retry_policy)
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    subscription_data_set: tuple[dict[str, Any], ...] | None = None
    attributes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> Bean:
        """The bean as RocketMQ writes it."""
        return Bean(
            attributes=dict(self.attributes),
            brokerId=self.broker_id,
            consumeBroadcastEnable=self.consume_broadcast_enable,
            consumeEnable=self.consume_enable,
            consumeFromMinEnable=self.consume_from_min_enable,
            consumeMessageOrderly=self.consume_message_orderly,
            consumeTimeoutMinute=self.consume_timeout_minute,
            groupName=self.group_name,
            groupRetryPolicy=_as_beans(self.group_retry_policy),
            groupSysFlag=self.group_sys_flag,
            notifyConsumerIdsChangedEnable=self.notify_consumer_ids_changed_enable,
            retryMaxTimes=self.retry_max_times,
            retryQueueNums=self.retry_queue_nums,
            subscriptionDataSet=_as_beans(self.subscription_data_set),
            whichBrokerWhenConsumeSlowly=self.which_broker_when_consume_slowly,
        )

    @classmethod
    def from_json(
        cls, raw: object, path: str = "subscriptionGroupConfig", name: str | None = None
    ) -> SubscriptionGroupConfig:
        """Read the bean, checking types only (rules: :meth:`validate`)."""
        obj = JsonObject(raw, path)
        group_name = obj.get_opt_str("groupName") or name
        if group_name is None:
            obj.get_str("groupName")  # raises "required"
        assert group_name is not None
        policy = obj.get_object("groupRetryPolicy")
        data_set = obj.raw.get("subscriptionDataSet")
        if data_set is not None:
            if not isinstance(data_set, list):
                raise ValidationError(
                    f"{path}.subscriptionDataSet", "type", f"{path}.subscriptionDataSet: not a list"
                )
            data_set = tuple(
                JsonObject(item, f"{path}.subscriptionDataSet[{i}]").raw
                for i, item in enumerate(data_set)
            )
        i32, i64 = (INT32_MIN, INT32_MAX), (-(2**63), INT64_MAX)
        return cls(
            group_name=group_name,
            consume_enable=obj.get_bool("consumeEnable", True),
            consume_from_min_enable=obj.get_bool("consumeFromMinEnable", True),
            consume_broadcast_enable=obj.get_bool("consumeBroadcastEnable", True),
            consume_message_orderly=obj.get_bool("consumeMessageOrderly", False),
            retry_queue_nums=obj.get_int("retryQueueNums", 1, *i32),
            retry_max_times=obj.get_int("retryMaxTimes", 16, *i32),
            group_retry_policy=(
                _default_retry_policy() if policy is None else copy.deepcopy(policy.raw)
            ),
            broker_id=obj.get_int("brokerId", 0, *i64),
            which_broker_when_consume_slowly=obj.get_int("whichBrokerWhenConsumeSlowly", 1, *i64),
            notify_consumer_ids_changed_enable=obj.get_bool("notifyConsumerIdsChangedEnable", True),
            group_sys_flag=obj.get_int("groupSysFlag", 0, *i32),
            consume_timeout_minute=obj.get_int("consumeTimeoutMinute", 15, *i64),
            subscription_data_set=copy.deepcopy(data_set),
            attributes=obj.get_str_map("attributes"),
        )

    def validate(self, only: Collection[str] | None = None) -> None:
        """Check the rules for incoming configs; ``only`` limits the check to some fields.

        Raises:
            ValidationError: ``field`` is the Python field name, ``rule`` the rule broken.
        """

        def wanted(name: str) -> bool:
            return only is None or name in only

        if wanted("group_name"):
            validate_group_name(self.group_name)
        for name in _BOOL_FIELDS:
            if wanted(name):
                check_bool(getattr(self, name), name)
        for name, (lo, hi) in _INT_FIELDS.items():
            if wanted(name):
                check_int(getattr(self, name), name, lo, hi)
        if wanted("group_retry_policy"):
            _validate_retry_policy(self.group_retry_policy)
        if wanted("subscription_data_set") and self.subscription_data_set is not None:
            for i, item in enumerate(self.subscription_data_set):
                _validate_subscription(item, f"subscription_data_set[{i}]")
        if wanted("attributes"):
            check_str_map(self.attributes, "attributes")


def _validate_retry_policy(policy: object) -> None:
    obj = JsonObject(policy, "group_retry_policy")
    check_choice(obj.raw.get("type"), "group_retry_policy.type", RETRY_POLICY_TYPES)
    customized = obj.get_object("customizedRetryPolicy")
    if customized is not None:
        customized.get_int_list("next", 0, INT64_MAX)
    exponential = obj.get_object("exponentialRetryPolicy")
    if exponential is not None:
        for key in ("initial", "max", "multiplier"):
            exponential.get_int(key, 0, 0, INT64_MAX)


def _validate_subscription(item: object, path: str) -> None:
    obj = JsonObject(item, path)
    validate_topic_name(obj.get_str("topic"), f"{path}.topic")
    if obj.raw.get("expressionType") is not None:
        check_choice(obj.raw["expressionType"], f"{path}.expressionType", EXPRESSION_TYPES)
    obj.get_opt_str("expression")
    obj.get_int("version", 0)


_UPDATABLE_FIELDS = frozenset(f.name for f in fields(SubscriptionGroupConfig)) - {"group_name"}


@dataclass(frozen=True, slots=True)
class _GroupsState:
    table: dict[str, SubscriptionGroupConfig]
    forbidden: dict[str, dict[str, int]]
    version: DataVersion


class SubscriptionGroupManager(ConfigFileManager[_GroupsState]):
    """The group table and ``subscriptionGroup.json``. All public methods are thread-safe.

    Constructing it touches no file: call :meth:`load` to read ``subscriptionGroup.json``.
    """

    FILE_NAME = "subscriptionGroup.json"

    def __init__(self, config_dir: StrPath, clock: Clock, *, auto_create: bool = True) -> None:
        super().__init__(config_dir, clock)
        self._auto_create = auto_create
        self._table: dict[str, SubscriptionGroupConfig] = {}
        self._forbidden: dict[str, dict[str, int]] = {}
        self._version = DataVersion.initial(clock)
        self._install_locked(self._empty_state())

    # -- queries ------------------------------------------------------------------------------

    @property
    def data_version(self) -> DataVersion:
        with self._lock:
            return self._version

    @staticmethod
    def is_system_group(name: str) -> bool:
        """True for the groups the broker creates for itself (spec 8.3)."""
        return name in SYSTEM_GROUPS or name.startswith(SYSTEM_GROUP_PREFIX)

    def get(self, name: str) -> SubscriptionGroupConfig | None:
        with self._lock:
            return self._table.get(name)

    def require(self, name: str) -> SubscriptionGroupConfig:
        """The group's config. Raises :class:`NotFoundError` if there is no such group."""
        config = self.get(name)
        if config is None:
            raise NotFoundError("group_name", "not_found", f"group {name!r} does not exist")
        return config

    def list(self) -> builtins.list[SubscriptionGroupConfig]:
        with self._lock:
            return builtins.list(self._table.values())

    def forbidden(self, group: str, topic: str) -> int:
        """The forbidden bitmask of ``group`` on ``topic`` (0 when none is set)."""
        with self._lock:
            return self._forbidden.get(group, {}).get(topic, 0)

    def forbidden_table(self) -> dict[str, dict[str, int]]:
        """A copy of ``forbiddenTable``."""
        with self._lock:
            return {group: dict(topics) for group, topics in self._forbidden.items()}

    # -- changes ------------------------------------------------------------------------------

    def create(self, config: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        """Add a group and persist.

        Raises:
            ValidationError: a rule is broken.
            ConflictError: the group exists already (system groups always do).
        """
        data_set = config.subscription_data_set
        config = replace(
            config,
            group_retry_policy=copy.deepcopy(config.group_retry_policy),
            subscription_data_set=None if data_set is None else copy.deepcopy(tuple(data_set)),
            attributes=dict(config.attributes),
        )
        config.validate()
        with self._changing():
            if config.group_name in self._table:
                raise ConflictError(f"group {config.group_name!r} already exists")
            self._commit_locked(table={**self._table, config.group_name: config})
        return config

    def update(self, name: str, **changes: Any) -> SubscriptionGroupConfig:
        """Change some fields of a group (Python field names) and persist.

        Raises:
            NotFoundError: no such group.
            ValidationError: an unknown field, or a new value breaks a rule.
        """
        for key in changes:
            if key not in _UPDATABLE_FIELDS:
                raise ValidationError(key, "unknown_field", f"{key!r} is not a group setting")
        changes = copy.deepcopy(changes)
        if isinstance(changes.get("subscription_data_set"), builtins.list):
            changes["subscription_data_set"] = tuple(changes["subscription_data_set"])
        with self._changing():
            updated = replace(self.require(name), **changes)
            updated.validate(only=changes.keys())
            self._commit_locked(table={**self._table, name: updated})
        return updated

    def delete(self, name: str) -> SubscriptionGroupConfig:
        """Remove a group (and its forbidden entries) and persist. Returns the removed config.

        Raises:
            ValidationError: rule ``system_group`` for the broker's own groups.
            NotFoundError: no such group.
        """
        if self.is_system_group(name):
            raise ValidationError(
                "group_name",
                "system_group",
                f"{name!r} is a system group of the broker and cannot be deleted",
            )
        with self._changing():
            removed = self.require(name)
            table = dict(self._table)
            del table[name]
            forbidden = {g: t for g, t in self._forbidden.items() if g != name}
            self._commit_locked(table=table, forbidden=forbidden)
        return removed

    def get_or_auto_create(self, name: str) -> SubscriptionGroupConfig | None:
        """The group, created with defaults (and persisted) on first use when auto-create is on
        or the name is a system group's. None when it does not exist and may not be created.

        Raises:
            ValidationError: ``name`` is not a valid group name.
        """
        existing = self.get(name)
        if existing is not None:
            return existing
        validate_group_name(name)
        if not (self._auto_create or self.is_system_group(name)):
            return None
        with self._changing():
            existing = self._table.get(name)
            if existing is not None:
                return existing
            config = SubscriptionGroupConfig(name)
            self._commit_locked(table={**self._table, name: config})
        return config

    def set_forbidden(self, group: str, topic: str, index: int, forbidden: bool) -> int:
        """Set or clear bit ``index`` (0..31) of ``group``'s forbidden mask on ``topic``.

        Returns:
            The new mask.
        """
        validate_group_name(group, "group")
        validate_topic_name(topic, "topic")
        check_int(index, "index", 0, 31)
        with self._changing():
            mask = self._forbidden.get(group, {}).get(topic, 0)
            mask = mask | (1 << index) if forbidden else mask & ~(1 << index)
            mask = mask - (1 << 32) if mask >= 1 << 31 else mask  # a Java int
            table = {g: dict(t) for g, t in self._forbidden.items()}
            table.setdefault(group, {})[topic] = mask
            self._commit_locked(forbidden=table)
        return mask

    def restore(self, configs: Iterable[SubscriptionGroupConfig]) -> None:
        """Put groups rebuilt from the store's data (``mqcore.metadata.reconcile``) into the
        table as one change, replacing entries of the same name. Recovery only: no rule is
        checked, and the groups are installed even if the write fails.

        Raises:
            OSError: the write failed (the groups are in memory all the same).
        """
        with self._changing():
            table = {**self._table, **{c.group_name: c for c in configs}}
            state = _GroupsState(table, self._forbidden, self._version.next_version(self._clock))
            self._restore_locked(state)

    def names_in(self, state: _GroupsState) -> frozenset[str]:
        return frozenset(state.table)

    # -- internals ----------------------------------------------------------------------------

    def _commit_locked(
        self,
        *,
        table: dict[str, SubscriptionGroupConfig] | None = None,
        forbidden: dict[str, dict[str, int]] | None = None,
    ) -> None:
        state = _GroupsState(
            self._table if table is None else table,
            self._forbidden if forbidden is None else forbidden,
            self._version.next_version(self._clock),
        )
        self._write_locked(state)
        self._install_locked(state)

    def _with_system_groups(
        self, table: dict[str, SubscriptionGroupConfig]
    ) -> dict[str, SubscriptionGroupConfig]:
        merged = dict(table)
        for name in SYSTEM_GROUPS:
            merged.setdefault(name, SubscriptionGroupConfig(name))
        return merged

    def _snapshot_locked(self) -> _GroupsState:
        forbidden = {g: dict(t) for g, t in self._forbidden.items()}
        return _GroupsState(dict(self._table), forbidden, self._version)

    def _empty_state(self) -> _GroupsState:
        return _GroupsState(self._with_system_groups({}), {}, DataVersion.initial(self._clock))

    def _install_locked(self, state: _GroupsState) -> None:
        self._table = state.table
        self._forbidden = state.forbidden
        self._version = state.version

    def _prepare_import_locked(self, state: _GroupsState) -> _GroupsState:
        return _GroupsState(state.table, state.forbidden, self._version.next_version(self._clock))

    def _encode(self, state: _GroupsState) -> str:
        return dumps_fastjson(
            Bean(
                dataVersion=state.version.to_json(),
                forbiddenTable={g: dict(t) for g, t in state.forbidden.items()},
                subscriptionGroupTable={n: c.to_json() for n, c in state.table.items()},
            )
        )

    def _decode(self, raw: Any, strict: bool) -> _GroupsState:
        doc = JsonObject(raw, "")
        table = decode_named_table(
            doc,
            "subscriptionGroupTable",
            strict,
            lambda value, path, key: SubscriptionGroupConfig.from_json(value, path, name=key),
            lambda config: config.group_name,
            "groupName",
            "group",
        )
        forbidden = _decode_forbidden(doc.get_object("forbiddenTable"), strict)
        return _GroupsState(
            self._with_system_groups(table), forbidden, decode_version(doc, self._clock)
        )


def _decode_forbidden(obj: JsonObject | None, strict: bool) -> dict[str, dict[str, int]]:
    forbidden: dict[str, dict[str, int]] = {}
    for group, topics in obj.items() if obj is not None else ():
        path = obj.child_path(group) if obj is not None else str(group)
        group_name = check_str(group, f"{path} key")
        if strict:
            validate_group_name(group_name, path)
        topics_obj = JsonObject(topics, path)
        masks: dict[str, int] = {}
        for topic, mask in topics_obj.items():
            topic_name = check_str(topic, f"{path} key")
            if strict:
                validate_topic_name(topic_name, topics_obj.child_path(topic))
            masks[topic_name] = check_int(mask, topics_obj.child_path(topic), INT32_MIN, INT32_MAX)
        forbidden[group_name] = masks
    return forbidden
