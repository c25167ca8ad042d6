"""TieredMessageStore: the local :class:`MessageStore` for reads, with cold offsets served
from the tier (spec 10, RocketMQ ``TieredMessageStore``).

Read strategy (``TieredConfig.read_strategy``, RocketMQ ``tieredStorageLevel``):

===========  ===============================================================================
DISABLE      never read the tier
NOT_IN_DISK  the tier when the offset is no longer in the local store (below the local min
             offset, or the local queue is empty or gone) — the default
NOT_IN_MEM   also when the message is probably out of the page cache: its CommitLog
             position lies more than ``in_memory_ratio`` of physical RAM behind the
             CommitLog end (RocketMQ's ``checkInMemByConsumeOffset``)
FORCE        always the tier
===========  ===============================================================================

Whatever the strategy: only offsets in the flat file's [min offset, commit offset) are
served from the tier; system topics always read locally; a tier miss or error falls back
to the local store. Every :class:`GetResult` says who served it (``source``: ``local`` or
``tier``). The min offset reported is min(local, tier); the max offset is the local one.

A cold read fetches ``read_ahead_batch`` messages; the extra ones wait in the
:class:`ReadAheadCache` for the next sequential pull.

``query_by_key`` and ``view_by_id`` ask the local store first and complete the answer from
the tier key index (so a message whose local segments were deleted is still found);
``offset_for_time`` searches the tier for times before the local queue's first message.

Also here: :meth:`TieredMessageStore.queue_status`, the per-queue tier progress (see
:class:`TierQueueStatus`) that REST and the console show.

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqcore.clock import Clock
from mqcore.errors import StoreError
from mqcore.format.properties import PROPERTY_UNIQ_KEY
from mqcore.format.record import Valid, check_record, decode_record
from mqcore.message import MessageExt
from mqcore.store.commit_log import CommitLog
from mqcore.store.config import StoreConfig
from mqcore.store.consume_queue import Unit
from mqcore.store.consume_queue_store import ConsumeQueueStore
from mqcore.store.read.queries import MAX_FILTER_SCAN_BYTES
from mqcore.store.results import GetResult, GetStatus
from mqcore.store.store import MessageStore
from mqcore.tiered.config import ReadStrategy
from mqcore.tiered.dispatcher import is_system_topic
from mqcore.tiered.flat_file import FlatFile, is_blank
from mqcore.tiered.read_ahead import ReadAheadCache
from mqcore.tiered.storage import TieredStorage

log = logging.getLogger(__name__)

SOURCE_LOCAL = "local"
SOURCE_TIER = "tier"


def physical_memory_bytes() -> int:
    """Physical RAM of this machine (0 if unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


@dataclass(frozen=True, slots=True)
class TierQueueStatus:
    """One queue's tier progress (queue offsets; ``size_bytes`` is flat CommitLog +
    flat ConsumeQueue + key index bytes in the backend; ``lag`` = local max − commit)."""

    topic: str
    queue_id: int
    tier_min_offset: int
    dispatch_offset: int
    commit_offset: int
    local_max_offset: int
    lag: int
    size_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class ReadStats:
    """Reads served per source, and tier errors that fell back to the local store."""

    local: int = 0
    tier: int = 0
    fallbacks: int = 0


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


class TieredMessageStore:
    """See the module docstring.

    Args:
        local: the open local store (also the write path, untouched here).
        tier: the tier (backend, metadata, flat files, key index).
        memory_bytes: physical RAM for NOT_IN_MEM (default: this machine's).
    """

    def __init__(
        self, local: MessageStore, tier: TieredStorage, *, memory_bytes: int | None = None
    ) -> None:
        self.local = local
        self.tier = tier
        self.config = tier.config
        self.memory_bytes = physical_memory_bytes() if memory_bytes is None else memory_bytes
        self.stats = ReadStats()
        self.cache = ReadAheadCache(
            tier.clock,
            self.config.read_ahead_count,
            self.config.read_ahead_bytes,
            self.config.read_ahead_expire_ms,
        )

    # -- the local store's parts, for callers that read them directly ---------------------

    @property
    def commit_log(self) -> CommitLog:
        return self.local.commit_log

    @property
    def queues(self) -> ConsumeQueueStore:
        return self.local.queues

    @property
    def root(self) -> Path:
        return self.local.root

    @property
    def store_config(self) -> StoreConfig:
        return self.local.config

    @property
    def clock(self) -> Clock:
        return self.local.clock

    # -- routing --------------------------------------------------------------------------

    def _flat(self, topic: str) -> bool:
        return self.config.read_strategy is not ReadStrategy.DISABLE and not is_system_topic(topic)

    def _tier_file(self, topic: str, queue_id: int) -> FlatFile | None:
        if not self._flat(topic):
            return None
        flat = self.tier.flat_file(topic, queue_id)
        if flat is None or flat.commit_offset <= flat.min_offset:
            return None
        return flat

    def _wants_tier(self, topic: str, queue_id: int, offset: int, flat: FlatFile) -> bool:
        if not flat.min_offset <= offset < flat.commit_offset:
            return False
        strategy = self.config.read_strategy
        if strategy is ReadStrategy.FORCE:
            return True
        low, high = self.local.min_offset(topic, queue_id), self.local.max_offset(topic, queue_id)
        if offset < low or high <= low:
            return True
        if strategy is ReadStrategy.NOT_IN_MEM:
            queue = self.local.queues.get(topic, queue_id)
            unit = queue.unit_at(offset) if queue is not None else None
            if unit is None:
                return True
            behind = self.local.commit_log.max_offset - unit.phys_offset
            return behind > self.config.in_memory_ratio * self.memory_bytes
        return False

    # -- reads ----------------------------------------------------------------------------

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: Collection[int] | None = None,
        *,
        max_bytes: int = 4 * 1024 * 1024,
    ) -> GetResult:
        """:meth:`MessageStore.get_messages`, from the tier when the strategy says so
        (module docstring); ``source`` says which served it."""
        flat = self._tier_file(topic, queue_id)
        if flat is not None and self._wants_tier(topic, queue_id, offset, flat):
            try:
                got = self._read_tier(flat, offset, max_count, tag_filter, max_bytes)
            except (StoreError, OSError) as exc:
                log.warning("tiered read %s/%s@%d failed: %s", topic, queue_id, offset, exc)
                got = None
            if got is not None:
                self.stats.tier += 1
                return got
            self.stats.fallbacks += 1
        got = self.local.get_messages(
            group, topic, queue_id, offset, max_count, tag_filter, max_bytes=max_bytes
        )
        self.stats.local += 1
        if flat is not None and flat.min_offset < got.min_offset:
            got = dataclasses.replace(got, min_offset=flat.min_offset)
        return got

    def _entries(
        self, flat: FlatFile, offset: int, scan: int, max_bytes: int
    ) -> list[tuple[Unit, bytes]]:
        cached = self.cache.take(flat.topic, flat.queue_id, offset, scan, max_bytes)
        if cached:
            return cached
        fetch = max(scan, self.config.read_ahead_batch)
        entries = flat.entries(offset, fetch, max(max_bytes, self.config.read_ahead_bytes))
        served, total = 0, 0
        for _unit, raw in entries:
            if served >= scan or (served and total + len(raw) > max_bytes):
                break
            served += 1
            total += len(raw)
        self.cache.put(flat.topic, flat.queue_id, entries[served:])
        return entries[:served]

    def _read_tier(
        self,
        flat: FlatFile,
        offset: int,
        max_count: int,
        tag_filter: Collection[int] | None,
        max_bytes: int,
    ) -> GetResult | None:
        """None on a miss (nothing committed there any more)."""
        codes = set(tag_filter) if tag_filter else None
        # A filtered read scans further, like the local store (maxFilterMessageSize).
        scan = max_count if codes is None else max(max_count, MAX_FILTER_SCAN_BYTES // 20)
        entries = self._entries(flat, offset, scan, max_bytes)
        if not entries:
            return None
        messages: list[MessageExt] = []
        next_offset = offset
        for unit, raw in entries:
            if len(messages) >= max_count:
                break
            next_offset = unit.queue_offset + 1
            if not raw:  # a blank unit: no record at that offset (flat_file.py), skipped
                continue
            if codes is not None and _int32(unit.tags_code) not in codes:
                continue
            messages.append(decode_record(raw, 0))
        if len(entries) > next_offset - offset:  # unread read-ahead goes back to the cache
            self.cache.put(flat.topic, flat.queue_id, entries[next_offset - offset :])
        status = GetStatus.FOUND if messages else GetStatus.NO_MATCHED_MESSAGE
        low = min(flat.min_offset, self.local.min_offset(flat.topic, flat.queue_id))
        high = max(self.local.max_offset(flat.topic, flat.queue_id), flat.commit_offset)
        return GetResult(status, next_offset, low, high, messages, source=SOURCE_TIER)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """min(local, tier)."""
        local = self.local.min_offset(topic, queue_id)
        flat = self._tier_file(topic, queue_id)
        return min(local, flat.min_offset) if flat is not None else local

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.local.max_offset(topic, queue_id)

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The local answer, or for a time before the local queue's first message the first
        tier offset stored at or after it."""
        local = self.local.offset_for_time(topic, queue_id, timestamp_ms)
        flat = self._tier_file(topic, queue_id)
        if flat is None:
            return local
        local_min = self.local.min_offset(topic, queue_id)
        if local > local_min or flat.min_offset >= local_min:
            return local
        low, high = flat.min_offset, min(flat.commit_offset, local_min)
        end = high
        try:
            while low < high:
                mid = (low + high) // 2
                if _store_time(flat, mid) >= timestamp_ms:
                    high = mid
                else:
                    low = mid + 1
        except (StoreError, OSError) as exc:
            log.warning("tiered offset_for_time %s/%s failed: %s", topic, queue_id, exc)
            return local
        return low if low < end else local

    def query_by_key(
        self, topic: str, key: str, begin_ms: int, end_ms: int, max_count: int = 32
    ) -> list[MessageExt]:
        """Local matches, completed from the tier key index, oldest first."""
        found = self.local.query_by_key(topic, key, begin_ms, end_ms, max_count)
        if len(found) >= max_count or not self._flat(topic):
            return found
        seen = {m.phys_offset for m in found}
        for message in self._tier_messages(topic, key, begin_ms, end_ms):
            if message.phys_offset in seen or not (
                key in message.keys or message.properties.get(PROPERTY_UNIQ_KEY) == key
            ):
                continue
            seen.add(message.phys_offset)
            found.append(message)
        return sorted(found, key=lambda m: m.phys_offset)[:max_count]

    def _tier_messages(self, topic: str, key: str, begin_ms: int, end_ms: int) -> list[MessageExt]:
        out: list[MessageExt] = []
        for queue_id in self.tier.topic_queues(topic):
            flat = self._tier_file(topic, queue_id)
            if flat is None:
                continue
            try:
                hits = self.tier.key_index.lookup(
                    topic, queue_id, key, begin_ms, end_ms, flat.min_offset
                )
                for hit in hits:
                    got = flat.entries(hit.queue_offset, 1)
                    if got and got[0][1]:
                        out.append(decode_record(got[0][1], 0))
            except (StoreError, OSError) as exc:
                log.warning("tiered key lookup in %s/%s failed: %s", topic, queue_id, exc)
        return out

    def view_by_id(self, msg_id: str) -> MessageExt | None:
        """The local answer, else the tier's record with that offsetMsgId or UNIQ_KEY."""
        found = self.local.view_by_id(msg_id)
        if found is not None or self.config.read_strategy is ReadStrategy.DISABLE:
            return found
        text = msg_id.strip().upper()
        topics = sorted({t for t, _ in self.tier.queues() if not is_system_topic(t)})
        for topic in topics:
            for message in self._tier_messages(topic, text, 0, 2**62):
                if (
                    message.offset_msg_id.upper() == text
                    or message.properties.get(PROPERTY_UNIQ_KEY, "").upper() == text
                ):
                    return message
        return None

    # -- status ---------------------------------------------------------------------------

    def queue_status(self) -> list[TierQueueStatus]:
        """Every tiered queue's progress, sorted by topic and queue id."""
        out = []
        for topic, queue_id in self.tier.queues():
            flat = self.tier.flat_file(topic, queue_id)
            if flat is None:
                continue
            commit = flat.commit_offset
            local_max = self.local.max_offset(topic, queue_id)
            out.append(
                TierQueueStatus(
                    topic,
                    queue_id,
                    flat.min_offset,
                    flat.dispatch_offset,
                    commit,
                    local_max,
                    max(0, local_max - commit),
                    flat.size_bytes() + self.tier.key_index.size_bytes(topic, queue_id),
                )
            )
        return out


#: Offsets :func:`_store_time` looks past a blank unit for the next record.
_BLANK_SCAN = 64


def _store_time(flat: FlatFile, queue_offset: int) -> int:
    """The store time of the record at ``queue_offset`` or, for a blank unit, of the next
    record (a blank stands where its record would have been: times stay in order)."""
    record = next((u for u in flat.units(queue_offset, _BLANK_SCAN) if not is_blank(u)), None)
    got = flat.entries(record.queue_offset, 1) if record is not None else []
    if not got:
        raise StoreError(f"tiered {flat.topic}/{flat.queue_id}: offset {queue_offset} missing")
    raw = got[0][1]
    checked = check_record(raw, 0, len(raw), check_crc=False)
    if not isinstance(checked, Valid):
        raise StoreError(f"tiered {flat.topic}/{flat.queue_id}: bad record at {queue_offset}")
    return checked.store_timestamp
