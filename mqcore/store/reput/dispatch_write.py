"""DispatchWriter: reput's writes for one dispatch batch: ConsumeQueue units, index keys,
then listeners.

Three forms of the same step, leaving the same files (``test_store_fast_paths.py``):
:meth:`DispatchWriter.write_columns` for the columns of ``dispatch_scan.py`` (no per-record
listener: reput's path; numbers as arrays, ``reput_columns.py``),
:meth:`DispatchWriter.write_rows` for its plain tuples, column by column, and
:meth:`DispatchWriter.write_requests` for ``DispatchRequest`` objects (a per-record listener
is registered). Each writes every unit of the batch before any listener runs (the long
polls' no-lost-wake-up rule, ``mqcore.broker.long_poll``), then hand the arrivals listeners
one mapping for the batch (``arrivals.py``). :meth:`DispatchWriter.write_one` is the
reference, one request at a time (recovery's dispatch, and the oracle of
:class:`ReferenceDispatchWriter`). The caller holds the reput lock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mqcore.format.layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
)
from mqcore.format.record import DispatchRequest
from mqcore.store.index.index_service import IndexColumns
from mqcore.store.reput.arrivals import (
    ArrivalsListener,
    QueueKey,
    arrivals_of_columns,
    arrivals_of_requests,
)
from mqcore.store.reput.reput_columns import Columns, Row
from mqcore.store.sharing.derived_views import DerivedViews

Listener = Callable[[DispatchRequest], None]

_QUEUED_TYPES = (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
#: The SYSFLAG bit of PREPARED (0x4) and ROLLBACK (0xC): such records get no queue unit.
_PREPARED = 0x4


class DispatchWriter:
    """Writes dispatch batches into ``views``' ConsumeQueues and index, then tells the
    listeners.

    Args:
        views: the derived views written to (read at each call: a follower or a rebuild
            may have replaced them).
        index_enabled: whether keys go to the index (``message_index_enable``).
        listeners: the store's per-record listeners (the live list, not a copy).
        arrivals_listeners: the store's arrivals listeners (the live list).
    """

    def __init__(
        self,
        views: DerivedViews,
        *,
        index_enabled: bool,
        listeners: Sequence[Listener] = (),
        arrivals_listeners: Sequence[ArrivalsListener] = (),
    ) -> None:
        self._views = views
        self.index_enabled = index_enabled
        self._listeners = listeners
        self._arrivals_listeners = arrivals_listeners

    def write_one(self, request: DispatchRequest) -> None:
        """The reference dispatch of one request: its unit (a queued transaction type
        only), the checkpoint's logics time, its index keys."""
        views = self._views
        if request.sys_flag & TRANSACTION_TYPE_MASK in _QUEUED_TYPES:
            queue = views.queues.find_or_create(request.topic, request.queue_id)
            queue.put(request.phys_offset, request.size, request.tags_code, request.queue_offset)
            views.checkpoint.logics_msg_timestamp = request.store_timestamp
        self.write_index(request)

    def write_index(self, request: DispatchRequest) -> None:
        """The index keys of one request (recovery re-puts an index tail with this)."""
        if self.index_enabled:
            self._views.index.build_index(
                request.topic,
                request.phys_offset,
                request.store_timestamp,
                request.uniq_key,
                request.keys,
                request.sys_flag & TRANSACTION_TYPE_MASK,
            )

    def write_rows(self, rows: list[Row]) -> None:
        """:meth:`write_requests` for rows, column by column, with the same resulting files."""
        views = self._views
        if not rows:
            return
        (
            topics, queue_ids, queue_offsets, phys_offsets, sizes, tags_codes,
            store_timestamps, keys, uniq_keys, sys_flags,
        ) = zip(*rows, strict=True)  # fmt: skip
        if _PREPARED in set(map(_PREPARED.__and__, sys_flags)):  # some take no queue unit
            queued = [row for row in rows if not row[9] & _PREPARED]  # row[9]: SYSFLAG
            if queued:
                q_topics, q_ids, q_offsets, q_phys, q_sizes, q_tags, q_times, *_ = zip(
                    *queued, strict=True
                )
                views.queues.put_columns(q_topics, q_ids, q_phys, q_sizes, q_tags, q_offsets)
                views.checkpoint.logics_msg_timestamp = q_times[-1]
            else:
                q_topics = q_ids = q_offsets = ()
        else:
            q_topics, q_ids, q_offsets = topics, queue_ids, queue_offsets
            views.queues.put_columns(
                topics, queue_ids, phys_offsets, sizes, tags_codes, queue_offsets
            )
            views.checkpoint.logics_msg_timestamp = store_timestamps[-1]
        if self.index_enabled:
            views.index.build_index_many(
                IndexColumns(topics, phys_offsets, store_timestamps, uniq_keys, keys, sys_flags)
            )
        if self._arrivals_listeners and q_topics:
            arrivals = arrivals_of_columns(q_topics, q_ids, q_offsets)
            for arrivals_listener in self._arrivals_listeners:
                arrivals_listener(arrivals)

    def write_columns(self, columns: Columns) -> None:
        """:meth:`write_rows` for the columns of ``dispatch_scan.scan_columns`` (reput's path),
        with the same resulting files. The numbers stay arrays (``reput_columns.py``); a batch
        of one queue, the usual one, goes to that queue's ``put_run`` whole and makes one
        arrival, with no list or mapping over its records."""
        views = self._views
        count = len(columns)
        if not count:
            return
        sys_flags = columns.sys_flags
        if (sys_flags & _PREPARED).any():  # some take no queue unit: rare, as rows
            self.write_rows(columns.rows())
            return
        changes = columns.topic_changes
        queue_ids = columns.queue_ids
        queue_offsets = columns.queue_offsets
        phys_offsets = columns.phys_offsets
        if len(changes) == 1 and (queue_ids == queue_ids[0]).all():
            topic = changes[0][1]
            queue_id = int(queue_ids[0])
            views.queues.find_or_create(topic, queue_id).put_run(
                phys_offsets, columns.sizes, columns.tags_codes, queue_offsets
            )
            topics = [topic] * count
            arrivals: dict[QueueKey, int] | None = {(topic, queue_id): int(queue_offsets[-1])}
        else:
            topics = columns.topics
            id_list: list[int] = queue_ids.tolist()
            offset_list: list[int] = queue_offsets.tolist()
            views.queues.put_columns(
                topics, id_list, phys_offsets.tolist(), columns.sizes.tolist(),
                columns.tags_codes.tolist(), offset_list,
            )  # fmt: skip
            arrivals = None
        store_timestamps = columns.store_timestamps
        views.checkpoint.logics_msg_timestamp = int(store_timestamps[-1])
        if self.index_enabled:
            views.index.build_index_many(
                IndexColumns(
                    topics,
                    phys_offsets,
                    store_timestamps,
                    columns.uniq_keys,
                    columns.keys,
                    sys_flags,
                )
            )
        if self._arrivals_listeners:
            if arrivals is None:
                arrivals = arrivals_of_columns(topics, id_list, offset_list)
            for arrivals_listener in self._arrivals_listeners:
                arrivals_listener(arrivals)

    def write_requests(self, batch: Sequence[DispatchRequest]) -> None:
        """:meth:`write_one` then the listeners for each request, with the same resulting
        files: ConsumeQueue units and index keys are written in batches (``put_many``,
        ``build_index_many``), ~2x faster than one request at a time."""
        views = self._views
        if not batch:
            return
        queued = [r for r in batch if r.sys_flag & TRANSACTION_TYPE_MASK in _QUEUED_TYPES]
        if queued:
            views.queues.put_many(queued)
            views.checkpoint.logics_msg_timestamp = queued[-1].store_timestamp
        if self.index_enabled:
            views.index.build_index_many(batch)
        if self._arrivals_listeners and queued:
            arrivals = arrivals_of_requests(queued)
            for arrivals_listener in self._arrivals_listeners:
                arrivals_listener(arrivals)
        listeners = self._listeners
        if listeners:
            for request in batch:
                for listener in listeners:
                    listener(request)


class ReferenceDispatchWriter(DispatchWriter):
    """The oracle the batched forms are compared with: every request of a batch through
    :meth:`~DispatchWriter.write_one`, then its per-record listeners, one at a time; no
    arrivals. Slower (one ConsumeQueue and index call per record); used by the tests that
    check the fast paths leave the same files, given to ``MessageStore(dispatch=...)``."""

    def write_requests(self, batch: Sequence[DispatchRequest]) -> None:
        for request in batch:
            self.write_one(request)
            for listener in self._listeners:
                listener(request)
