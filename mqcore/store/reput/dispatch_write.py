"""Reput's writes for one dispatch batch: ConsumeQueue units, index keys, then listeners.

Three forms of the same step, leaving the same files (``test_store_fast_paths.py``):
:func:`write_columns` for the columns of ``dispatch_scan.py`` (no per-record listener: reput's
path; numbers as arrays, ``reput_columns.py``), :func:`write_rows` for its plain tuples,
column by column, and :func:`write_requests` for ``DispatchRequest`` objects (a per-record
listener is registered). Each writes every unit of the batch before any listener runs (the
long polls' no-lost-wake-up rule, ``mqcore.broker.long_poll``), then hand the arrivals
listeners one mapping for the batch (``arrivals.py``). The caller holds the reput lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mqcore.format.layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
)
from mqcore.format.record import DispatchRequest
from mqcore.store.index.index_service import IndexColumns
from mqcore.store.reput.arrivals import QueueKey, arrivals_of_columns, arrivals_of_requests
from mqcore.store.reput.reput_columns import Columns, Row

if TYPE_CHECKING:
    from mqcore.store.store import MessageStore

_QUEUED_TYPES = (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)
#: The SYSFLAG bit of PREPARED (0x4) and ROLLBACK (0xC): such records get no queue unit.
_PREPARED = 0x4


def write_rows(store: MessageStore, rows: list[Row]) -> None:
    """:func:`write_requests` for rows, column by column, with the same resulting files."""
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
            store.queues.put_columns(q_topics, q_ids, q_phys, q_sizes, q_tags, q_offsets)
            store.checkpoint.logics_msg_timestamp = q_times[-1]
        else:
            q_topics = q_ids = q_offsets = ()
    else:
        q_topics, q_ids, q_offsets = topics, queue_ids, queue_offsets
        store.queues.put_columns(topics, queue_ids, phys_offsets, sizes, tags_codes, queue_offsets)
        store.checkpoint.logics_msg_timestamp = store_timestamps[-1]
    if store.config.message_index_enable:
        store.index.build_index_many(
            IndexColumns(topics, phys_offsets, store_timestamps, uniq_keys, keys, sys_flags)
        )
    if store.arrivals_listeners and q_topics:
        arrivals = arrivals_of_columns(q_topics, q_ids, q_offsets)
        for arrivals_listener in store.arrivals_listeners:
            arrivals_listener(arrivals)


def write_columns(store: MessageStore, columns: Columns) -> None:
    """:func:`write_rows` for the columns of ``dispatch_scan.scan_columns`` (reput's path),
    with the same resulting files. The numbers stay arrays (``reput_columns.py``); a batch
    of one queue, the usual one, goes to that queue's ``put_run`` whole and makes one
    arrival, with no list or mapping over its records."""
    count = len(columns)
    if not count:
        return
    sys_flags = columns.sys_flags
    if (sys_flags & _PREPARED).any():  # some take no queue unit: rare, as rows
        write_rows(store, columns.rows())
        return
    changes = columns.topic_changes
    queue_ids = columns.queue_ids
    queue_offsets = columns.queue_offsets
    phys_offsets = columns.phys_offsets
    if len(changes) == 1 and (queue_ids == queue_ids[0]).all():
        topic = changes[0][1]
        queue_id = int(queue_ids[0])
        store.queues.find_or_create(topic, queue_id).put_run(
            phys_offsets, columns.sizes, columns.tags_codes, queue_offsets
        )
        topics = [topic] * count
        arrivals: dict[QueueKey, int] | None = {(topic, queue_id): int(queue_offsets[-1])}
    else:
        topics = columns.topics
        id_list: list[int] = queue_ids.tolist()
        offset_list: list[int] = queue_offsets.tolist()
        store.queues.put_columns(
            topics, id_list, phys_offsets.tolist(), columns.sizes.tolist(),
            columns.tags_codes.tolist(), offset_list,
        )  # fmt: skip
        arrivals = None
    store_timestamps = columns.store_timestamps
    store.checkpoint.logics_msg_timestamp = int(store_timestamps[-1])
    if store.config.message_index_enable:
        store.index.build_index_many(
            IndexColumns(
                topics, phys_offsets, store_timestamps, columns.uniq_keys, columns.keys, sys_flags
            )
        )
    if store.arrivals_listeners:
        if arrivals is None:
            arrivals = arrivals_of_columns(topics, id_list, offset_list)
        for arrivals_listener in store.arrivals_listeners:
            arrivals_listener(arrivals)


def write_requests(store: MessageStore, batch: Sequence[DispatchRequest]) -> None:
    """``MessageStore._dispatch`` then the listeners for each request, with the same resulting
    files: ConsumeQueue units and index keys are written in batches (``put_many``,
    ``build_index_many``), ~2x faster than one request at a time."""
    if not batch:
        return
    queued = [r for r in batch if r.sys_flag & TRANSACTION_TYPE_MASK in _QUEUED_TYPES]
    if queued:
        store.queues.put_many(queued)
        store.checkpoint.logics_msg_timestamp = queued[-1].store_timestamp
    if store.config.message_index_enable:
        store.index.build_index_many(batch)
    if store.arrivals_listeners and queued:
        arrivals = arrivals_of_requests(queued)
        for arrivals_listener in store.arrivals_listeners:
            arrivals_listener(arrivals)
    listeners = store.listeners
    if listeners:
        for request in batch:
            for listener in listeners:
                listener(request)
