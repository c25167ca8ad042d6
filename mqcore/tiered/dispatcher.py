"""The upload dispatcher (spec 10 "Upload", RocketMQ ``MessageStoreDispatcherImpl``): one
:func:`upload_step` copies new messages of every queue into the tier.

Per queue of every non-system topic the local store holds:

1. A queue the tier does not know starts at the local offset stored
   ``initial_window_ms`` ago (2 min; None = the local min offset), clamped to the local
   [min, max]. A queue the tier knows resumes at its flat file's *dispatch offset*, which
   after a restart is the *commit offset* (the flat file drops the uncommitted tail and
   truncates backend bytes past the committed sizes, ``flat_file.py``).
2. CQ units + CommitLog records from the dispatch offset up to the local max offset are
   appended to the flat file (byte for byte), at most ``max_messages`` per queue per step.
   Whenever the group-commit thresholds are reached (count, bytes, age of the oldest
   waiting message) the flat file uploads; at the end of the queue's turn it uploads if
   they are reached or ``force`` is set. Waiting messages stay buffered for the next step:
   that is the "retry the commit if commit offset < dispatch offset" of the spec.
3. After a successful upload, the committed messages' keys (UNIQ_KEY, each KEYS entry and
   the offsetMsgId) are appended to the tier key index, from the records this step copied
   (or, after a restart, read back from the tier). The index keeps its own position, so an
   upload that committed just before a crash is indexed by the next step.

Failures: an upload error (backend, metadata save) is reported in the result and the queue's
flat file is dropped, so the next step resumes from the saved progress: nothing is lost
and nothing duplicated. A local gap (the dispatch offset is below the local min offset, or
a record was deleted before it was uploaded) stops that queue and is reported in ``gaps``;
the tier never skips offsets.

Records the local store does not serve: a blank unit (a record missing from the CommitLog,
whose offset the queue keeps) and a record in a quarantined range (``quarantine.py``: kept
in place, skipped by local readers) are copied as a blank unit (``FlatFile.append_blank``),
so the tier skips that offset as the local store does and the queue goes on. A record that
fails its checks (framing, body CRC: the tier must not keep what local reads would refuse)
is handed to ``CommitLog.quarantine_unreadable``: quarantined, it becomes a blank unit too;
otherwise the unit itself is wrong (a damaged ConsumeQueue, which the start check finds and
a rebuild repairs) and the queue stops there for this step, reported in ``gaps``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from mqcore.errors import StoreError
from mqcore.format.properties import PROPERTY_UNIQ_KEY
from mqcore.format.record import Corrupt, Valid, check_record, decode_record
from mqcore.metadata.topics import RESERVED_TOPICS, SYSTEM_TOPIC_PREFIX
from mqcore.store.consume_queue import BLANK_SIZE, ConsumeQueue, Unit
from mqcore.store.store import MessageStore
from mqcore.tiered.flat_file import FlatFile
from mqcore.tiered.storage import TieredStorage

log = logging.getLogger(__name__)

#: Units read from a local ConsumeQueue per call.
_UNIT_BATCH = 1024
#: Messages one step copies per queue at most (keeps a step short; the loop runs again at
#: once while it progresses).
DEFAULT_MAX_MESSAGES = 65_536


def is_system_topic(topic: str) -> bool:
    """Topics that are never tiered and always read locally (RocketMQ
    ``TopicValidator.isSystemTopic``: the reserved names and ``rmq_sys_*``)."""
    return topic in RESERVED_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


@dataclass(slots=True)
class UploadResult:
    """What one step did (figures for status pages and tests)."""

    messages_appended: int = 0
    #: Of ``messages_appended``: offsets copied as blank units (no record to serve).
    blanks_appended: int = 0
    bytes_appended: int = 0
    messages_committed: int = 0
    commits: int = 0
    keys_indexed: int = 0
    queues: int = 0
    errors: list[str] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)

    @property
    def progressed(self) -> bool:
        return bool(self.messages_appended or self.messages_committed or self.keys_indexed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "messages_appended": self.messages_appended,
            "blanks_appended": self.blanks_appended,
            "bytes_appended": self.bytes_appended,
            "messages_committed": self.messages_committed,
            "commits": self.commits,
            "keys_indexed": self.keys_indexed,
            "queues": self.queues,
            "errors": list(self.errors),
            "gaps": list(self.gaps),
        }


def upload_step(
    store: MessageStore,
    tier: TieredStorage,
    *,
    force: bool = False,
    max_messages: int = DEFAULT_MAX_MESSAGES,
) -> UploadResult:
    """One pass over every queue (module docstring). Never raises for one queue's upload
    error (it is in ``errors``)."""
    result = UploadResult()
    for topic in store.queues.topics():
        if is_system_topic(topic):
            continue
        for queue_id, queue in sorted(store.queues.queues(topic).items()):
            result.queues += 1
            try:
                _upload_queue(store, tier, topic, queue_id, queue, force, max_messages, result)
            except (StoreError, OSError) as exc:
                message = f"{topic}/{queue_id}: {type(exc).__name__}: {exc}"
                log.warning("tiered upload of %s failed; resuming from the commit offset", message)
                result.errors.append(message)
                tier.drop(topic, queue_id)
    return result


def _start_offset(store: MessageStore, tier: TieredStorage, topic: str, queue_id: int) -> int:
    low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    window = tier.config.initial_window_ms
    if window is None:
        return low
    at = store.offset_for_time(topic, queue_id, tier.clock.now_ms() - window)
    return max(low, min(high, at))


def _upload_queue(
    store: MessageStore,
    tier: TieredStorage,
    topic: str,
    queue_id: int,
    queue: ConsumeQueue,
    force: bool,
    max_messages: int,
    result: UploadResult,
) -> None:
    flat = tier.flat_file(topic, queue_id)
    local_min, local_max = queue.min_offset, queue.max_offset
    if flat is None:
        if local_max <= local_min:
            return
        flat = tier.create_flat_file(topic, queue_id, _start_offset(store, tier, topic, queue_id))
    offset = flat.dispatch_offset
    copied = 0
    recent: dict[int, bytes] = {}  # records copied in this step, for the key index
    if offset < local_min and offset < local_max:
        result.gaps.append(f"{topic}/{queue_id}: tier at {offset}, local min {local_min}")
    else:
        while offset < local_max and copied < max_messages:
            units = queue.units(offset, min(_UNIT_BATCH, local_max - offset, max_messages - copied))
            if not units:
                break
            for unit in units:
                raw = _record_of(store, topic, queue_id, unit)
                if raw is None:
                    result.gaps.append(f"{topic}/{queue_id}: record {offset} is not readable")
                    offset = local_max  # stop this queue for this step
                    break
                if raw:
                    flat.append(raw, unit.queue_offset, unit.tags_code)  # checks the framing
                    recent[unit.queue_offset] = raw
                    result.bytes_appended += unit.size
                else:
                    flat.append_blank(unit.queue_offset)
                    result.blanks_appended += 1
                result.messages_appended += 1
                copied += 1
                offset = unit.queue_offset + 1
                # Only count and size here: a backlog older than the commit timeout would
                # otherwise commit (fsync, metadata, key index) after every single message.
                # Age is checked once, after the copy, as RocketMQ does per batch.
                if flat.buffer_full():
                    _commit(tier, flat, result, recent)
    if flat.dispatch_offset > flat.commit_offset and (force or flat.should_commit()):
        _commit(tier, flat, result, recent)
    _index_keys(tier, flat, result, recent)


def _record_of(store: MessageStore, topic: str, queue_id: int, unit: Unit) -> bytes | None:
    """The record ``unit`` points at, checked; ``b""`` when the local store has none there
    to serve (module docstring: a blank unit goes to the tier); None when it cannot be read
    (expired, or a wrong unit)."""
    if unit.phys_offset == 0 and unit.size == BLANK_SIZE:
        return b""
    quarantine = store.commit_log.quarantine
    if quarantine.ranges:
        entry = quarantine.covering(unit.phys_offset, unit.size)
        if entry is not None:
            where = f"{topic}-{queue_id} offset {unit.queue_offset}"
            quarantine.log_skip(entry, "the tiered upload", where)
            return b""
    raw = store.commit_log.read(unit.phys_offset, unit.size)
    if raw is None:
        return None
    checked = check_record(raw, 0, len(raw), check_crc=True)
    if isinstance(checked, Valid) and checked.size == len(raw):
        return raw
    reason = checked.detail if isinstance(checked, Corrupt) else f"not one record: {checked}"
    if store.commit_log.quarantine_unreadable(unit.phys_offset, unit.size, reason):
        return b""
    log.error(
        "tiered upload of %s-%d stops at offset %d: its unit points at no valid record "
        "(%s); the ConsumeQueue is damaged", topic, queue_id, unit.queue_offset, reason,
    )  # fmt: skip
    return None


def _commit(
    tier: TieredStorage, flat: FlatFile, result: UploadResult, recent: dict[int, bytes]
) -> None:
    count = flat.commit()
    if count:
        result.commits += 1
        result.messages_committed += count
        _index_keys(tier, flat, result, recent)


def _index_keys(
    tier: TieredStorage, flat: FlatFile, result: UploadResult, recent: dict[int, bytes]
) -> None:
    """Index the committed messages the key index has not seen (module docstring, 3)."""
    topic, queue_id = flat.topic, flat.queue_id
    offset = tier.key_index.next_offset(topic, queue_id)
    offset = max(offset, flat.min_offset)
    end = flat.commit_offset
    while offset < end:
        stop = min(end, offset + _UNIT_BATCH)
        if all(o in recent for o in (offset, stop - 1)):  # blank units have no record
            batch = [(o, recent.pop(o)) for o in range(offset, stop) if o in recent]
        else:
            batch = [(u.queue_offset, raw) for u, raw in flat.entries(offset, stop - offset)]
        if not batch:
            return
        entries: list[tuple[str, int, int]] = []
        for queue_offset, raw in batch:
            if not raw:
                continue  # a blank unit: no keys
            message = decode_record(raw, 0, read_body=False)
            ts = message.store_timestamp
            uniq = message.properties.get(PROPERTY_UNIQ_KEY)
            keys = {message.offset_msg_id, *message.keys}
            if uniq:
                keys.add(uniq)
            entries.extend((key, queue_offset, ts) for key in sorted(keys))
        offset = batch[-1][0] + 1
        tier.key_index.add(topic, queue_id, entries, offset)
        result.keys_indexed += len(entries)
