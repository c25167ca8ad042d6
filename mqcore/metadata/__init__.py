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
kept as ``X.bak`` and both recorded in an integrity record ``X.sum`` (SHA-256 and generation;
RocketMQ's bytes are unchanged), and is loaded from its newest intact copy
(:mod:`mqcore.metadata.checked_file`). :meth:`Metadata.load` also removes the ``*.tmp`` files
interrupted writes left, and, when a file had to be recovered, re-creates what the store's data
shows and the loaded copy lacks and reports it (:mod:`mqcore.metadata.recovery`). The periodic
persists belong to the caller (a service step), as does the shutdown
:meth:`Metadata.persist_all`.
"""

from __future__ import annotations

import inspect
import logging
import os
from typing import TYPE_CHECKING, Any

from mqcore.clock import Clock
from mqcore.metadata.checked_file import remove_stale_temp_files
from mqcore.metadata.config_file import ConfigFileManager
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
from mqcore.metadata.reconcile import StoreEvidence
from mqcore.metadata.recovery import PROBLEM_KIND, ConfigRecovery, recover_after_load
from mqcore.metadata.topics import TopicConfig, TopicConfigManager

if TYPE_CHECKING:
    from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)

__all__ = [
    "BloomFilterData",
    "ConfigRecovery",
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
        self.config_dir = os.fspath(config_dir)
        self.topics = TopicConfigManager(config_dir, clock, **routed["topics"])
        self.groups = SubscriptionGroupManager(config_dir, clock, **routed["groups"])
        self.offsets = ConsumerOffsetManager(config_dir, clock, **routed["offsets"])
        self.delay_offsets = DelayOffsetManager(config_dir, clock, **routed["delay_offsets"])
        self.filters = ConsumerFilterManager(config_dir, clock, **routed["filters"])

    @property
    def managers(self) -> tuple[ConfigFileManager[Any], ...]:
        """The five managers, in load order."""
        return (self.topics, self.groups, self.offsets, self.delay_offsets, self.filters)

    def load(self, store: MessageStore | None = None) -> list[ConfigRecovery]:
        """Load every file from its newest intact copy, after removing leftover ``*.tmp``
        files; then reconcile, rewrite and report what had to be recovered.

        Args:
            store: the open store these files belong to. Its ConsumeQueues are the evidence
                for re-creating topics and groups a recovered file lacks, and each recovery
                is reported to its health (``config_recovered``). Without it, recoveries are
                reconciled with the offsets and subscriptions only, and only logged.

        Returns:
            One record per file that was recovered or rebuilt (empty on a clean start).

        Raises:
            OSError: a file exists but cannot be read or set aside.
        """
        # Standalone, this process is the only writer of the directory until its services
        # start; beside a Celery worker, only our own files' leftovers are surely stale.
        shared = store is not None and store.role != "standalone"
        names = [manager.FILE_NAME for manager in self.managers]
        remove_stale_temp_files(self.config_dir, names if shared else None)
        outcomes = {manager.FILE_NAME: manager.load() for manager in self.managers}
        evidence = StoreEvidence() if store is None else StoreEvidence.of(store)
        recoveries = recover_after_load(self, outcomes, evidence)
        for recovery in recoveries:
            log.error("config recovered (%s): %s", recovery.problem_id, recovery.summary)
            if store is None:
                continue
            try:
                store.health.report(
                    PROBLEM_KIND, recovery.problem_id, recovery.summary, recovery.detail
                )
            except OSError as exc:
                log.error("could not record %s in the store's health: %s", recovery.problem_id, exc)
        return recoveries

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
