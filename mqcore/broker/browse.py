"""Time-range browse over every queue of a topic, in pages.

Each queue's slice of the range is ``[offset_for_time(begin), offset_for_time(end + 1))``
(spec 7.2, LOWER: the first offset stored at or after the time). A page merges the queues by
store time (ties: queue id, then queue offset) with a heap, reading each queue in chunks, and
stops after ``limit`` messages.

The cursor is opaque to callers: URL-safe base64 of a small JSON object holding the topic,
the range and, per queue, the next offset to read::

    {"v": 1, "t": "<topic>", "b": <begin_ms>, "e": <end_ms>, "o": {"<queue_id>": <offset>}}

A cursor is only valid for the topic and range it came from. ``exhausted`` is true when no
queue has anything left in the range; a page can then still hold messages (the last page).
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
from collections import deque

from mqcore.broker.lag import offset_at_time, queue_ids
from mqcore.broker.reader import StoreReader
from mqcore.broker.types import BrowsePage
from mqcore.errors import ValidationError
from mqcore.message import MessageExt
from mqcore.metadata import TopicConfig
from mqcore.store.results import GetStatus

CURSOR_VERSION = 1
CHUNK_MAX_COUNT = 64


def encode_cursor(topic: str, begin_ms: int, end_ms: int, offsets: dict[int, int]) -> str:
    doc = {"v": CURSOR_VERSION, "t": topic, "b": begin_ms, "e": end_ms}
    doc["o"] = {str(q): o for q, o in sorted(offsets.items())}
    raw = json.dumps(doc, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, topic: str, begin_ms: int, end_ms: int) -> dict[int, int]:
    """Per-queue offsets of a cursor.

    Raises:
        ValidationError: field ``cursor``, rule ``invalid`` (not a cursor) or ``mismatch``
            (made for another topic or range).
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        doc = json.loads(raw)
        offsets = {int(q): int(o) for q, o in doc["o"].items()}
        same = (doc["v"], doc["t"], doc["b"], doc["e"]) == (CURSOR_VERSION, topic, begin_ms, end_ms)
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
        raise ValidationError(
            "cursor", "invalid", "cursor: not a cursor this broker made"
        ) from None
    if not same:
        raise ValidationError(
            "cursor", "mismatch", "cursor: it belongs to another topic or time range"
        )
    return offsets


class _QueueReader:
    """Reads one queue's slice of the range in chunks."""

    def __init__(
        self,
        store: StoreReader,
        topic: str,
        queue_id: int,
        start: int,
        end: int,
        window: tuple[int, int],
    ) -> None:
        self.store, self.topic, self.queue_id = store, topic, queue_id
        self.position, self.end, self.window = start, end, window
        self.buffer: deque[MessageExt] = deque()

    def refill(self) -> None:
        """Read until something in the time window is buffered or the slice is done."""
        begin_ms, end_ms = self.window
        while not self.buffer and self.position < self.end:
            count = min(CHUNK_MAX_COUNT, self.end - self.position)
            got = self.store.get_messages("", self.topic, self.queue_id, self.position, count)
            if got.next_offset <= self.position and got.status is not GetStatus.FOUND:
                self.position = self.end  # nothing readable here any more
                return
            for message in got.messages:
                if (
                    message.queue_offset < self.end
                    and begin_ms <= message.store_timestamp <= end_ms
                ):
                    self.buffer.append(message)
            self.position = min(max(got.next_offset, self.position), self.end)

    def next_offset(self) -> int:
        return self.buffer[0].queue_offset if self.buffer else self.position

    @property
    def done(self) -> bool:
        return not self.buffer and self.position >= self.end


def browse(
    store: StoreReader,
    config: TopicConfig,
    begin_ms: int,
    end_ms: int,
    limit: int,
    cursor: str | None,
) -> BrowsePage:
    """One page; see the module docstring. Arguments are checked by the caller."""
    topic = config.topic_name
    ids = queue_ids(store, config, topic)
    starts = (
        decode_cursor(cursor, topic, begin_ms, end_ms)
        if cursor
        else {q: offset_at_time(store, topic, q, begin_ms) for q in ids}
    )
    readers = [
        _QueueReader(
            store,
            topic,
            q,
            starts.get(q, 0),
            offset_at_time(store, topic, q, end_ms + 1),
            (begin_ms, end_ms),
        )
        for q in ids
    ]
    heap: list[tuple[int, int, int, int]] = []
    for index, reader in enumerate(readers):
        _push_head(heap, reader, index)
    page: list[MessageExt] = []
    while heap and len(page) < limit:
        *_, index = heapq.heappop(heap)
        reader = readers[index]
        page.append(reader.buffer.popleft())
        _push_head(heap, reader, index)
    exhausted = all(reader.done for reader in readers)
    next_cursor = (
        None
        if exhausted
        else encode_cursor(topic, begin_ms, end_ms, {r.queue_id: r.next_offset() for r in readers})
    )
    return BrowsePage(tuple(page), next_cursor, exhausted)


def _push_head(heap: list[tuple[int, int, int, int]], reader: _QueueReader, index: int) -> None:
    reader.refill()
    if reader.buffer:
        head = reader.buffer[0]
        heapq.heappush(heap, (head.store_timestamp, head.queue_id, head.queue_offset, index))
