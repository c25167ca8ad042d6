"""Upload progress of tiered storage: ``<store>/config/tieredStoreMetadata.json`` (spec 10).

One entry per queue (``QueueProgress``) plus, per file type, the table of its committed
segments. Written in fastjson's pretty format with :func:`mqcore.metadata.jsonfile.atomic_write`
(temp + fsync + ``.bak`` + rename), read with ``load_with_backup``::

    {
    →"commitLogSegmentTable":{
    →→"TopicTest/0":{0:{
    →→→"baseOffset":0, "createTimestamp":..., "path":"TopicTest/0", "sealTimestamp":0,
    →→→"size":4096, "status":0, "type":0, "beginTimestamp":..., "endTimestamp":...
    →→}}
    →},
    →"consumeQueueSegmentTable":{ same shape },
    →"queueMetadataTable":{
    →→"TopicTest":{0:{
    →→→"commitOffset":42, "dispatchOffset":42, "maxOffset":42, "minOffset":0,
    →→→"queue":{"queueId":0,"topic":"TopicTest"}, "updateTimestamp":...
    →→}}
    →}
    }

Meaning of the offsets (queue offsets): ``minOffset`` is the first offset the tier holds,
``commitOffset`` (= RocketMQ's ``maxOffset``) the end of what is durably uploaded, and
``dispatchOffset`` the end of what was appended when the file was saved; it is informational,
because appended-but-uncommitted bytes live in memory and a restart resumes from
``commitOffset``. Segment ``size`` is the committed byte count; resume compares it to the
backend (``flat_file.py``).

Crash behaviour: the file is replaced atomically, so it holds the state of some completed
``save``; a bad file falls back to ``.bak``. Saves happen *after* the backend append, so the
backend can be ahead of this file, never behind it.
"""

from __future__ import annotations

import copy
import enum
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mqcore.errors import ValidationError
from mqcore.metadata.jsonfile import Bean, atomic_write, dumps_fastjson, load_with_backup

FILE_NAME = "tieredStoreMetadata.json"


class SegmentStatus(enum.IntEnum):
    """RocketMQ ``FileSegmentMetadata`` status codes."""

    NEW = 0
    SEALED = 1
    DELETED = 2


@dataclass(slots=True)
class SegmentMeta:
    """One committed segment: base and committed size in flat-file bytes, times in epoch ms."""

    base_offset: int
    size: int
    status: SegmentStatus = SegmentStatus.NEW
    create_timestamp: int = 0
    begin_timestamp: int = 0
    end_timestamp: int = 0
    seal_timestamp: int = 0


@dataclass(slots=True)
class QueueProgress:
    """Upload progress of one queue (queue offsets) and its committed segments by base."""

    topic: str
    queue_id: int
    min_offset: int
    dispatch_offset: int
    commit_offset: int
    update_timestamp: int = 0
    commit_log_segments: dict[int, SegmentMeta] = field(default_factory=dict)
    consume_queue_segments: dict[int, SegmentMeta] = field(default_factory=dict)


class TieredMetadataStore:
    """The progress of every queue, saved as one JSON file. Thread-safe (one lock).

    Args:
        store_root: the store directory; the file is ``<store_root>/config/tieredStoreMetadata.json``.
    """

    def __init__(self, store_root: str | os.PathLike[str]) -> None:
        self.path = Path(store_root) / "config" / FILE_NAME
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, int], QueueProgress] = {}

    def load(self) -> TieredMetadataStore:
        """Read the file (or its ``.bak``); a missing file is an empty state. Returns self.

        Raises:
            StoreError: both the file and its backup exist and neither can be read.
        """
        queues = load_with_backup(self.path, _decode) or {}
        with self._lock:
            self._queues = queues
        return self

    def get(self, topic: str, queue_id: int) -> QueueProgress | None:
        """A copy of the queue's progress, or None if it was never saved."""
        with self._lock:
            progress = self._queues.get((topic, queue_id))
            return copy.deepcopy(progress) if progress is not None else None

    def put(self, progress: QueueProgress) -> None:
        """Record (a copy of) ``progress`` in memory; :meth:`save` makes it durable."""
        with self._lock:
            self._queues[(progress.topic, progress.queue_id)] = copy.deepcopy(progress)

    def remove(self, topic: str, queue_id: int) -> None:
        """Forget a queue (in memory until the next :meth:`save`)."""
        with self._lock:
            self._queues.pop((topic, queue_id), None)

    def queues(self) -> list[tuple[str, int]]:
        """The (topic, queue_id) pairs known, sorted."""
        with self._lock:
            return sorted(self._queues)

    def save(self) -> None:
        """Write the whole state atomically (serialised by the lock).

        Raises:
            OSError: the disk refused; the previous file is unchanged.
        """
        with self._lock:
            text = dumps_fastjson(_encode(self._queues))
            atomic_write(self.path, text)


# --- encoding -----------------------------------------------------------------------------


def _queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}/{queue_id}"


def _encode_segment(key: str, kind: int, seg: SegmentMeta) -> Bean:
    return Bean(
        path=key,
        type=kind,
        baseOffset=seg.base_offset,
        size=seg.size,
        status=int(seg.status),
        createTimestamp=seg.create_timestamp,
        beginTimestamp=seg.begin_timestamp,
        endTimestamp=seg.end_timestamp,
        sealTimestamp=seg.seal_timestamp,
    )


def _encode(queues: dict[tuple[str, int], QueueProgress]) -> Bean:
    queue_table: dict[str, dict[int, Bean]] = {}
    commit_log: dict[str, dict[int, Bean]] = {}
    consume_queue: dict[str, dict[int, Bean]] = {}
    for (topic, queue_id), p in sorted(queues.items()):
        queue_table.setdefault(topic, {})[queue_id] = Bean(
            queue=Bean(topic=topic, queueId=queue_id),
            minOffset=p.min_offset,
            maxOffset=p.commit_offset,
            dispatchOffset=p.dispatch_offset,
            commitOffset=p.commit_offset,
            updateTimestamp=p.update_timestamp,
        )
        key = _queue_key(topic, queue_id)
        commit_log[key] = {b: _encode_segment(key, 0, s) for b, s in p.commit_log_segments.items()}
        consume_queue[key] = {
            b: _encode_segment(key, 1, s) for b, s in p.consume_queue_segments.items()
        }
    return Bean(
        queueMetadataTable=queue_table,
        commitLogSegmentTable=commit_log,
        consumeQueueSegmentTable=consume_queue,
    )


def _int(obj: Any, key: str) -> int:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValidationError(key, "int", f"{FILE_NAME}: {key!r} must be an integer")
    return value


def _decode_segments(table: Any, key: str) -> dict[int, SegmentMeta]:
    segments = table.get(key, {}) if isinstance(table, dict) else {}
    if not isinstance(segments, dict):
        raise ValidationError(key, "object", f"{FILE_NAME}: segment table {key!r} is not a map")
    out: dict[int, SegmentMeta] = {}
    for raw in segments.values():
        try:
            status = SegmentStatus(_int(raw, "status"))
        except ValueError as exc:
            raise ValidationError("status", "enum", f"{FILE_NAME}: {exc}") from exc
        seg = SegmentMeta(
            base_offset=_int(raw, "baseOffset"),
            size=_int(raw, "size"),
            status=status,
            create_timestamp=_int(raw, "createTimestamp"),
            begin_timestamp=_int(raw, "beginTimestamp"),
            end_timestamp=_int(raw, "endTimestamp"),
            seal_timestamp=_int(raw, "sealTimestamp"),
        )
        out[seg.base_offset] = seg
    return dict(sorted(out.items()))


def _decode(doc: Any) -> dict[tuple[str, int], QueueProgress]:
    """Parsed JSON → progress by queue. Raises ValidationError on any shape error."""
    if not isinstance(doc, dict) or not isinstance(doc.get("queueMetadataTable", {}), dict):
        raise ValidationError("queueMetadataTable", "object", f"{FILE_NAME}: not a metadata map")
    queues: dict[tuple[str, int], QueueProgress] = {}
    for topic_queues in doc.get("queueMetadataTable", {}).values():
        if not isinstance(topic_queues, dict):
            raise ValidationError("queueMetadataTable", "object", f"{FILE_NAME}: bad queue map")
        for raw in topic_queues.values():
            queue = raw.get("queue") if isinstance(raw, dict) else None
            topic = queue.get("topic") if isinstance(queue, dict) else None
            if not isinstance(topic, str):
                raise ValidationError("queue", "object", f"{FILE_NAME}: queue without a topic")
            queue_id = _int(queue, "queueId")
            key = _queue_key(topic, queue_id)
            queues[(topic, queue_id)] = QueueProgress(
                topic=topic,
                queue_id=queue_id,
                min_offset=_int(raw, "minOffset"),
                dispatch_offset=_int(raw, "dispatchOffset"),
                commit_offset=_int(raw, "commitOffset"),
                update_timestamp=_int(raw, "updateTimestamp"),
                commit_log_segments=_decode_segments(doc.get("commitLogSegmentTable"), key),
                consume_queue_segments=_decode_segments(doc.get("consumeQueueSegmentTable"), key),
            )
    return queues
