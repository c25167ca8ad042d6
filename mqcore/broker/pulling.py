"""The pull path: checks (spec 11, pull side), one store read with the tag re-check, and the
mapping of the store's statuses to what consumers see (spec 7.1).

==============================================  ====================
store status (spec 7.1)                         pull status
==============================================  ====================
FOUND                                           FOUND
NO_MATCHED_MESSAGE, MESSAGE_WAS_REMOVING        NO_MATCHED_MSG
OFFSET_OVERFLOW_ONE, OFFSET_FOUND_NULL          NO_NEW_MSG
NO_MESSAGE_IN_QUEUE, NO_MATCHED_LOGIC_QUEUE     NO_NEW_MSG at offset 0, else OFFSET_ILLEGAL
OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY         OFFSET_ILLEGAL
==============================================  ====================

:func:`scan` goes further than one store read when tags filter everything out: it continues
from ``next_offset`` (up to :data:`MAX_SCAN_ROUNDS` reads of at most one ConsumeQueue file's
slice each), and a scan that reaches the queue's end without a match answers NO_NEW_MSG at
the end offset, so that a long poll keeps waiting instead of bouncing back to the client.
"""

from __future__ import annotations

from mqcore.broker.config import BrokerConfig
from mqcore.broker.errors import NoPermissionError
from mqcore.broker.reader import StoreReader
from mqcore.broker.tags import TagFilter
from mqcore.broker.types import PullResult, PullStatus
from mqcore.errors import NotFoundError, ValidationError
from mqcore.metadata import Metadata, TopicConfig
from mqcore.metadata.topics import PERM_READ, is_readable
from mqcore.store.results import GetStatus

MAX_SCAN_ROUNDS = 16

_NO_MATCH = frozenset({GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING})
_NO_NEW = frozenset({GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.OFFSET_FOUND_NULL})
_EMPTY_QUEUE = frozenset({GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE})


def check_pull(
    metadata: Metadata,
    config: BrokerConfig,
    group: str | None,
    topic: str,
    queue_id: int,
) -> TopicConfig:
    """Spec 11 (pull side), in order: broker readable; group exists (auto-created when
    allowed) and may consume; topic exists and is readable; ``0 <= queue_id < readQueueNums``.

    Raises:
        NoPermissionError: ``broker_not_readable``, ``consume_disabled``,
            ``topic_not_readable``.
        NotFoundError: unknown group or topic (``not_found``).
        ValidationError: bad names, ``queue_id`` out of ``range``.
    """
    if not config.broker_perm & PERM_READ:
        raise NoPermissionError("broker", "broker_not_readable", "the broker refuses reads now")
    if group is not None:
        group_config = metadata.groups.get_or_auto_create(group)
        if group_config is None:
            raise NotFoundError("group", "not_found", f"group {group!r} does not exist")
        if not group_config.consume_enable:
            raise NoPermissionError(
                "group", "consume_disabled", f"group {group!r} has consuming switched off"
            )
    topic_config = metadata.topics.get(topic)
    if topic_config is None:
        raise NotFoundError("topic", "not_found", f"topic {topic!r} does not exist")
    if not is_readable(topic_config.perm):
        raise NoPermissionError(
            "topic",
            "topic_not_readable",
            f"topic {topic!r} cannot be read (perm {topic_config.perm})",
        )
    if not 0 <= queue_id < topic_config.read_queue_nums:
        raise ValidationError(
            "queue_id",
            "range",
            f"queue_id: topic {topic!r} has read queues 0..{topic_config.read_queue_nums - 1}"
            f" (got {queue_id})",
        )
    return topic_config


def check_pull_args(
    config: BrokerConfig, offset: int, max_count: int, wait_ms: int, max_bytes: int
) -> int:
    """Check the numbers of a pull. Returns ``wait_ms`` cut to ``max_pull_wait_ms``."""
    if offset < 0:
        raise ValidationError("offset", "range", f"offset: must be >= 0 (got {offset})")
    if not 1 <= max_count <= config.max_pull_count:
        raise ValidationError(
            "max_count",
            "range",
            f"max_count: must be 1..{config.max_pull_count} (got {max_count})",
        )
    if wait_ms < 0:
        raise ValidationError("wait_ms", "range", f"wait_ms: must be >= 0 (got {wait_ms})")
    if max_bytes < 1:
        raise ValidationError("max_bytes", "range", f"max_bytes: must be >= 1 (got {max_bytes})")
    return min(wait_ms, config.max_pull_wait_ms)


def read_once(
    store: StoreReader,
    group: str | None,
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    tags: TagFilter,
    max_bytes: int,
) -> PullResult:
    """One store read, the tag re-check, and the status mapping."""
    got = store.get_messages(
        group or "",
        topic,
        queue_id,
        offset,
        max_count,
        tags.codes,
        max_bytes=max_bytes,
    )
    if got.status is GetStatus.FOUND:
        messages = tuple(m for m in got.messages if tags.matches(m.tags))
        status = PullStatus.FOUND if messages else PullStatus.NO_MATCHED_MSG
    else:
        messages = ()
        status = _map_status(got.status, offset)
    return PullResult(status, messages, got.next_offset, got.min_offset, got.max_offset)


def _map_status(status: GetStatus, offset: int) -> PullStatus:
    if status in _NO_MATCH:
        return PullStatus.NO_MATCHED_MSG
    if status in _NO_NEW:
        return PullStatus.NO_NEW_MSG
    if status in _EMPTY_QUEUE:
        return PullStatus.NO_NEW_MSG if offset == 0 else PullStatus.OFFSET_ILLEGAL
    return PullStatus.OFFSET_ILLEGAL


def scan(
    store: StoreReader,
    group: str | None,
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    tags: TagFilter,
    max_bytes: int,
) -> PullResult:
    """:func:`read_once`, continued past filtered-out stretches (see the module docstring)."""
    result = read_once(store, group, topic, queue_id, offset, max_count, tags, max_bytes)
    rounds = 1
    while (
        result.status is PullStatus.NO_MATCHED_MSG
        and offset < result.next_offset < result.max_offset
        and rounds < MAX_SCAN_ROUNDS
    ):
        offset = result.next_offset
        result = read_once(store, group, topic, queue_id, offset, max_count, tags, max_bytes)
        rounds += 1
    if result.status is PullStatus.NO_MATCHED_MSG and result.next_offset >= result.max_offset:
        return PullResult(
            PullStatus.NO_NEW_MSG, (), result.next_offset, result.min_offset, result.max_offset
        )
    return result
