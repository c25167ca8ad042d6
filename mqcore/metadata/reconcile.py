"""Re-creating the topics and groups that a recovered config lacks, from what the store holds.

When ``topics.json`` or ``subscriptionGroup.json`` was loaded from an older copy (or from no
copy at all), the store's data may name topics and groups that copy never heard of: messages
in a topic created by the lost change, offsets of a group created since. Without them the
messages are unreachable (the topic answers 404) although every byte is still on disk. This
module finds them and says how to re-create them; :mod:`mqcore.metadata.recovery` applies and
reports the plan.

Evidence, cheapest first, never the CommitLog itself:

* **ConsumeQueue directories** (``<store>/consumequeue/<topic>/<queueId>``), as the store
  loaded them at open. After a standalone open, recovery has dispatched every record up to the
  end of the CommitLog, so every topic with a message has its queue directories: scanning the
  CommitLog again (minutes on a large store) would find nothing more.
* **Committed offsets** (``consumerOffset.json``: ``topic@group → {queueId: offset}``).
* **Subscriptions** (``subscriptionGroup.json``: each group's ``subscriptionDataSet``).
* For groups, also the ``%RETRY%<group>`` and ``%DLQ%<group>`` topics (in the table or the
  queue directories): a group had to exist for them to exist.

Rules for what is re-created:

* A missing user topic gets read and write queue counts = the highest queue id seen + 1 (at
  least the number of queue directories; :data:`~mqcore.metadata.topics.MAX_QUEUE_NUMS` at
  most), or the default queue count when only a subscription names it; default perm (RW),
  no attributes, filter type ``SINGLE_TAG``.
* A topic the loaded copy has with *fewer* queues than the data shows is widened to cover
  them (the lost change may have added queues; messages in the extra ones would be hidden).
* ``%RETRY%``/``%DLQ%`` topics follow the same rules as :meth:`TopicConfigManager.\
create_retry_topic` and ``create_dlq_topic`` (perm RW), with at least one queue.
* System topics (``SCHEDULE_TOPIC_XXXX``, ``RMQ_SYS_*``, ``rmq_sys_*``, the cluster and
  broker topics, ...) are never re-created from data: the broker's own rules create them.
  Likewise system groups. Names that are not valid topic or group names are ignored (and
  listed).
* A missing group gets RocketMQ's defaults, with ``retryQueueNums`` = its retry topic's queue
  count when it has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from mqcore.errors import ValidationError
from mqcore.metadata.groups import SubscriptionGroupConfig, SubscriptionGroupManager
from mqcore.metadata.offsets import ConsumerOffsetManager
from mqcore.metadata.topics import MAX_QUEUE_NUMS, TopicConfig, TopicConfigManager
from mqcore.metadata.validation import (
    DLQ_TOPIC_PREFIX,
    RETRY_TOPIC_PREFIX,
    validate_group_name,
    validate_topic_name,
)

if TYPE_CHECKING:
    from mqcore.store.store import MessageStore


@dataclass(frozen=True, slots=True)
class StoreEvidence:
    """What the store's data shows exists: queue ids by topic, from its ConsumeQueues."""

    queue_ids: Mapping[str, frozenset[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, store: MessageStore) -> StoreEvidence:
        """The ConsumeQueues ``store`` loaded at open (no file is read here)."""
        queues = store.queues
        return cls({topic: frozenset(queues.queues(topic)) for topic in queues.topics()})


@dataclass(frozen=True, slots=True)
class TopicFix:
    """A topic to put in the table: ``config``, why (``evidence``), and the queue counts it
    had when it existed with too few queues (``widened_from``: read, write)."""

    config: TopicConfig
    evidence: tuple[str, ...]
    widened_from: tuple[int, int] | None = None

    def describe(self) -> str:
        name, n = self.config.topic_name, self.config.read_queue_nums
        if self.widened_from is not None:
            return f"{name} ({self.widened_from[0]} → {n} queues)"
        return f"{name} ({n} {'queue' if n == 1 else 'queues'})"


@dataclass(frozen=True, slots=True)
class GroupFix:
    """A group to put in the table, and why."""

    config: SubscriptionGroupConfig
    evidence: tuple[str, ...]


@dataclass
class _Seen:
    queue_ids: set[int] = field(default_factory=set)
    evidence: list[str] = field(default_factory=list)


def plan_topics(
    topics: TopicConfigManager,
    offsets: ConsumerOffsetManager,
    groups: SubscriptionGroupManager,
    store: StoreEvidence,
) -> tuple[list[TopicFix], list[str]]:
    """The topics to re-create or widen (module docstring), and the names ignored with why.

    Thread-safe (reads the managers through their public methods).
    """
    seen: dict[str, _Seen] = {}
    for topic, queue_ids in sorted(store.queue_ids.items()):
        entry = seen.setdefault(topic, _Seen())
        entry.queue_ids |= queue_ids
        entry.evidence.append(f"ConsumeQueue directories for queues {_ranges(queue_ids)}")
    for (topic, group), queue_ids in sorted(offsets.committed_queues().items()):
        entry = seen.setdefault(topic, _Seen())
        entry.queue_ids |= queue_ids
        entry.evidence.append(f"offsets committed by group {group}")
    for config in groups.list():
        for item in config.subscription_data_set or ():
            subscribed = item.get("topic")
            if isinstance(subscribed, str):
                entry = seen.setdefault(subscribed, _Seen())
                entry.evidence.append(f"subscribed by group {config.group_name}")
    fixes: list[TopicFix] = []
    ignored: list[str] = []
    for name, entry in sorted(seen.items()):
        if topics.is_system_topic(name):
            continue
        try:
            validate_topic_name(name)
        except ValidationError as exc:
            ignored.append(f"{name!r}: {exc}")
            continue
        fix = _topic_fix(topics, name, entry)
        if fix is not None:
            fixes.append(fix)
    return fixes, ignored


def _topic_fix(topics: TopicConfigManager, name: str, entry: _Seen) -> TopicFix | None:
    needed = min(max(entry.queue_ids) + 1, MAX_QUEUE_NUMS) if entry.queue_ids else 0
    evidence = tuple(entry.evidence)
    existing = topics.get(name)
    if existing is not None:
        if needed <= min(existing.read_queue_nums, existing.write_queue_nums):
            return None
        widened = replace(
            existing,
            read_queue_nums=max(existing.read_queue_nums, needed),
            write_queue_nums=max(existing.write_queue_nums, needed),
        )
        return TopicFix(widened, evidence, (existing.read_queue_nums, existing.write_queue_nums))
    internal = name.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX))
    count = needed or (1 if internal else topics.default_queue_nums)
    return TopicFix(TopicConfig(name, count, count), evidence)


def plan_groups(
    groups: SubscriptionGroupManager,
    offsets: ConsumerOffsetManager,
    topics: TopicConfigManager,
    store: StoreEvidence,
) -> tuple[list[GroupFix], list[str]]:
    """The groups to re-create (module docstring), and the names ignored with why."""
    seen: dict[str, list[str]] = {}
    for topic, group in sorted((t, g) for t, g in offsets.committed_queues()):
        seen.setdefault(group, []).append(f"offsets committed on {topic}")
    topic_names = sorted({t.topic_name for t in topics.list()} | set(store.queue_ids))
    for topic in topic_names:
        for prefix in (RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX):
            if topic.startswith(prefix) and len(topic) > len(prefix):
                seen.setdefault(topic[len(prefix) :], []).append(f"has the topic {topic}")
    fixes: list[GroupFix] = []
    ignored: list[str] = []
    for name, evidence in sorted(seen.items()):
        if groups.is_system_group(name) or groups.get(name) is not None:
            continue
        try:
            validate_group_name(name)
        except ValidationError as exc:
            ignored.append(f"{name!r}: {exc}")
            continue
        retry = topics.get(RETRY_TOPIC_PREFIX + name)
        retry_queues = retry.write_queue_nums if retry is not None else 1
        config = SubscriptionGroupConfig(name, retry_queue_nums=retry_queues)
        fixes.append(GroupFix(config, tuple(evidence)))
    return fixes, ignored


def _ranges(ids: frozenset[int] | set[int]) -> str:
    """``0-3, 5`` for {0, 1, 2, 3, 5}."""
    runs: list[list[int]] = []
    for n in sorted(ids):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"
