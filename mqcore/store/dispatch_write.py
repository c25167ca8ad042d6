"""Reput's writes for one dispatch batch: ConsumeQueue units, index keys, then listeners.

Three forms of the same step, leaving the same files (``test_store_fast_paths.py``):
:func:`write_columns` for the columns of ``dispatch_scan.py`` (no per-record listener: reput's
path), :func:`write_rows` for its plain tuples, column by column, and :func:`write_requests` for ``DispatchRequest`` objects (a per-record
listener is registered). Both write every unit of the batch before any listener runs (the
long polls' no-lost-wake-up rule, ``mqcore.broker.long_poll``), then hand the arrivals
listeners one mapping for the batch (``arrivals.py``). The caller holds the reput lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mqcore.store.arrivals import arrivals_of_columns, arrivals_of_requests
from mqcore.store.dispatch_scan import Columns, Row
from mqcore.store.format import DispatchRequest
from mqcore.store.index_service import IndexColumns
from mqcore.store.record_layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
)

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
    """:func:`write_rows` for the columns of ``dispatch_scan.scan_columns`` (reput's path):
    the lists go to the ConsumeQueue and the index as they are, with no rows in between."""
    sys_flags = columns.sys_flags
    if not sys_flags:
        return
    if any(map(_PREPARED.__and__, sys_flags)):  # some take no queue unit: rare, as rows
        write_rows(store, columns.rows())
        return
    topics, queue_ids, queue_offsets, phys_offsets, sizes, tags_codes, store_timestamps, keys, uniq_keys, _ = columns.lists()  # fmt: skip
    store.queues.put_columns(topics, queue_ids, phys_offsets, sizes, tags_codes, queue_offsets)
    store.checkpoint.logics_msg_timestamp = store_timestamps[-1]
    if store.config.message_index_enable:
        store.index.build_index_many(
            IndexColumns(topics, phys_offsets, store_timestamps, uniq_keys, keys, sys_flags)
        )
    if store.arrivals_listeners:
        arrivals = arrivals_of_columns(topics, queue_ids, queue_offsets)
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
