"""The config store: RocketMQ's ``{root}/config/*.json`` files, byte-compatible (spec 8).

=========================  =========================================  ======================
file                       manager                                    written
=========================  =========================================  ======================
``topics.json``            :class:`TopicConfigManager`                on every change
``subscriptionGroup.json`` :class:`SubscriptionGroupManager`          on every change
``consumerOffset.json``    :class:`ConsumerOffsetManager`             by ``persist()`` (5 s)
``delayOffset.json``       :class:`DelayOffsetManager`                by ``persist()`` (10 s)
``consumerFilter.json``    :class:`ConsumerFilterManager`             by ``persist()`` (10 s)
=========================  =========================================  ======================

:class:`Metadata` owns one of each. Every file is written atomically with the previous version
kept as ``X.bak`` and read back with a fallback to it (:mod:`mqcore.metadata.jsonfile`), so a
crash at any moment loses nothing that was written. The periodic persists belong to the caller
(a service step), as does the shutdown :meth:`Metadata.persist_all`.
"""

from __future__ import annotations

import inspect
from typing import Any

from mqcore.clock import Clock
from mqcore.metadata.consumer_filter import (
    BloomFilterData,
    ConsumerFilterData,
    ConsumerFilterManager,
)
from mqcore.metadata.data_version import DataVersion
from mqcore.metadata.delay_offsets import DelayOffsetManager, parse_delay_levels
from mqcore.metadata.groups import SubscriptionGroupConfig, SubscriptionGroupManager
from mqcore.metadata.jsonfile import StrPath
from mqcore.metadata.offsets import ConsumerOffsetManager
from mqcore.metadata.topics import TopicConfig, TopicConfigManager

__all__ = [
    "BloomFilterData",
    "ConsumerFilterData",
    "ConsumerFilterManager",
    "ConsumerOffsetManager",
    "DataVersion",
    "DelayOffsetManager",
    "Metadata",
    "SubscriptionGroupConfig",
    "SubscriptionGroupManager",
    "TopicConfig",
    "TopicConfigManager",
    "parse_delay_levels",
]

# Facade option -> (manager, its keyword). Every keyword-only option of a manager is accepted
# under its own name, except where two managers would clash.
_RENAMED = {
    "auto_create_subscription_group": ("groups", "auto_create"),
    "consumer_offset_update_version_step": ("offsets", "update_version_step"),
    "delay_offset_update_version_step": ("delay_offsets", "update_version_step"),
    "filter_data_clean_time_span_ms": ("filters", "clean_after_ms"),
}


def _route_options(options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    topic_keywords = {
        name
        for name, param in inspect.signature(TopicConfigManager.__init__).parameters.items()
        if param.kind is inspect.Parameter.KEYWORD_ONLY
    }
    routed: dict[str, dict[str, Any]] = {
        "topics": {},
        "groups": {},
        "offsets": {},
        "delay_offsets": {},
        "filters": {},
    }
    for name, value in options.items():
        if name in _RENAMED:
            manager, keyword = _RENAMED[name]
            routed[manager][keyword] = value
        elif name in topic_keywords:
            routed["topics"][name] = value
        else:
            raise TypeError(f"Metadata() got an unexpected option {name!r}")
    return routed


class Metadata:
    """The five config managers of one broker, over one ``config`` directory.

    Args:
        config_dir: ``{root}/config``; created on the first write.
        clock: the time source for data versions and filter lifetimes.
        **options: :class:`TopicConfigManager` keywords (``cluster_name``, ``broker_name``,
            ``auto_create_topic_enable``, ...), plus ``auto_create_subscription_group``,
            ``consumer_offset_update_version_step``, ``delay_offset_update_version_step`` and
            ``filter_data_clean_time_span_ms`` (RocketMQ's ``BrokerConfig`` names).

    Raises:
        TypeError: an unknown option.

    Constructing touches no file; call :meth:`load`. Thread-safe as its managers are.
    """

    def __init__(self, config_dir: StrPath, clock: Clock, **options: Any) -> None:
        routed = _route_options(options)
        self.topics = TopicConfigManager(config_dir, clock, **routed["topics"])
        self.groups = SubscriptionGroupManager(config_dir, clock, **routed["groups"])
        self.offsets = ConsumerOffsetManager(config_dir, clock, **routed["offsets"])
        self.delay_offsets = DelayOffsetManager(config_dir, clock, **routed["delay_offsets"])
        self.filters = ConsumerFilterManager(config_dir, clock, **routed["filters"])

    def load(self) -> None:
        """Load every file (each falls back to its ``.bak``; a missing file is empty state).

        Raises:
            StoreError: a file and its backup are both unreadable.
        """
        self.topics.load()
        self.groups.load()
        self.offsets.load()
        self.delay_offsets.load()
        self.filters.load()

    def persist_all(self) -> None:
        """Write every file (at shutdown, or from a periodic step).

        Raises:
            OSError: a write failed; the files written before it are kept.
        """
        self.topics.persist()
        self.groups.persist()
        self.offsets.persist()
        self.delay_offsets.persist()
        self.filters.persist()
