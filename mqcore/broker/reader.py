"""StoreReader: what the broker's read paths need from a store.

:class:`~mqcore.store.store.MessageStore` is one; so is
:class:`~mqcore.tiered.tiered_store.TieredMessageStore`, which serves cold offsets from the
tier (the runtime hands it to the Broker as ``reader`` when tiered storage is on). Writes
always go to the local ``MessageStore``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from mqcore.message import MessageExt
from mqcore.store.commit_log import CommitLog
from mqcore.store.consume_queue_store import ConsumeQueueStore
from mqcore.store.results import GetResult


class StoreReader(Protocol):
    """The read side of a store (signatures of ``MessageStore``)."""

    @property
    def commit_log(self) -> CommitLog: ...

    @property
    def queues(self) -> ConsumeQueueStore: ...

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
    ) -> GetResult: ...

    def query_by_key(
        self, topic: str, key: str, begin_ms: int, end_ms: int, max_count: int = 32
    ) -> list[MessageExt]: ...

    def view_by_id(self, msg_id: str) -> MessageExt | None: ...

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...

    def min_offset(self, topic: str, queue_id: int) -> int: ...

    def max_offset(self, topic: str, queue_id: int) -> int: ...
