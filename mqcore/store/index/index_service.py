"""The ordered set of IndexFiles under ``<root>/index``: build on dispatch, query by key.

RocketMQ's ``IndexService`` (spec/store-format.md 4.4-4.7, 5.4, 6.5, 7.4), minus its threads:

* ``build_index`` is called by reput for every dispatched message. It indexes ``UNIQ_KEY`` and
  each space-separated element of ``KEYS`` as ``topic#key`` into the newest file, rolling to a
  new file when that one is full.
* ``query`` walks the files newest to oldest and returns at most 64 CommitLog offsets.
* ``delete_expired`` drops the oldest files once the CommitLog below them is gone.

Files are named by their local creation time, ``yyyyMMddHHmmssSSS``, and load in name order.
When the clock would give a name not after the newest file's (same millisecond, or local time
going back at a DST change), the name is the newest one plus 1 ms, so name order stays
creation order.

Checkpoint contract: when a file fills up it is flushed (``msync``) right away, on the caller's
thread, and only then is its end timestamp published through ``last_filled_end_timestamp`` and
the ``on_file_filled`` callback; the caller stores it as the checkpoint's ``indexMsgTimestamp``.
RocketMQ flushes the full file on a helper thread instead; here it costs one msync of at most
~420 MB per 20,000,000 keys on the reput thread, in exchange for no thread and an ordering that
is easy to see: the checkpoint never names an index file that is not on disk.

Damage: a file that does not open (its size is wrong for the dimensions: cut short; a header
past them) is noted in ``damaged_files`` and moved to ``rebuild/trash`` by :meth:`load`, which
goes on with the others; the start check (``derived_start.py``, ``derived_check.py``) finds
the rest and has the whole index rebuilt beside, then swapped in (``index_build``).

Crash behaviour: index files are derived, rebuilt not checksummed. After an abnormal exit,
``load`` destroys every file whose end timestamp is after the checkpoint's ``indexMsgTimestamp``;
recovery re-dispatches the CommitLog from before that time and ``build_index`` skips messages
below the newest file's end phys offset, so nothing is indexed twice except, as in RocketMQ, the
keys of the one message sitting exactly at that offset.

Threading: one writer thread calls ``build_index`` (and ``flush``); any threads may call
``query``, ``files`` and ``check`` meanwhile; ``delete_expired`` may run on a cleanup thread. The
file list is copy-on-write: mutations swap in a new list under ``_lock``, readers take the
current list without locking, and each IndexFile keeps a reader count so a deleted file is
unmapped only after the last reader is done with it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final, NamedTuple, Protocol

import numpy as np

from mqcore.clock import Clock, SystemClock
from mqcore.errors import CorruptIndexError, StoreError, StoreNotWritableError
from mqcore.format.hashing import (
    index_hash_array,
    index_hash_with_prefix,
    index_hashes_of_grid,
    index_hashes_of_ragged,
    index_hashes_with_prefix,
    java_hash_u32,
)
from mqcore.store.index import index_bulk
from mqcore.store.index.index_file import IndexFile
from mqcore.store.recovery import rebuild_dir
from mqcore.store.reput.key_column import FixedKeys, RaggedKeys

__all__ = [
    "DEFAULT_HASH_SLOTS",
    "DEFAULT_MAX_ENTRIES",
    "MAX_QUERY_COUNT",
    "TRANSACTION_ROLLBACK_TYPE",
    "IndexService",
    "Indexable",
    "QueryResult",
    "file_name_for",
]

DEFAULT_HASH_SLOTS: Final = 5_000_000  # maxHashSlotNum
DEFAULT_MAX_ENTRIES: Final = 20_000_000  # maxIndexNum
MAX_QUERY_COUNT: Final = 64  # maxMsgsNumBatch
TRANSACTION_ROLLBACK_TYPE: Final = 0xC  # MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
_ROLLBACK: Final = TRANSACTION_ROLLBACK_TYPE
KEY_SEPARATOR: Final = " "  # MessageConst.KEY_SEPARATOR
_NAME_DIGITS: Final = 17
_NAME_FORMAT: Final = "%Y%m%d%H%M%S"

_PREFIX_CACHE_LIMIT: Final = 10_000

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueryResult:
    """RocketMQ ``QueryOffsetResult``: offsets newest first plus the newest file's end values."""

    phys_offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phys_offset: int


def file_name_for(now_ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: local time as ``yyyyMMddHHmmssSSS``."""
    seconds, millis = divmod(now_ms, 1000)
    return time.strftime(_NAME_FORMAT, time.localtime(seconds)) + f"{millis:03d}"


def _name_after(name: str) -> str:
    """The name 1 ms after ``name`` (naive calendar arithmetic, so never ambiguous)."""
    moment = datetime.strptime(name[:14], _NAME_FORMAT) + timedelta(milliseconds=int(name[14:]) + 1)
    return moment.strftime(_NAME_FORMAT) + f"{moment.microsecond // 1000:03d}"


def _is_index_name(name: str) -> bool:
    return len(name) == _NAME_DIGITS and name.isdigit() and name.isascii()


class Indexable(Protocol):
    """What :meth:`IndexService.build_index_many` reads from each message
    (``record.DispatchRequest`` has these attributes)."""

    @property
    def topic(self) -> str: ...
    @property
    def phys_offset(self) -> int: ...
    @property
    def store_timestamp(self) -> int: ...
    @property
    def uniq_key(self) -> str | None: ...
    @property
    def keys(self) -> str | None: ...
    @property
    def sys_flag(self) -> int: ...


class IndexColumns(NamedTuple):
    """The :class:`Indexable` fields of a run of messages, one sequence per field, for
    :meth:`IndexService.build_index_many` (reput's rows path, ``dispatch_scan.py``)."""

    topics: Sequence[str]
    phys_offsets: Sequence[int] | index_bulk.Ints
    store_timestamps: Sequence[int] | index_bulk.Ints
    uniq_keys: Sequence[str | None]
    """A ``key_column.FixedKeys`` (reput's keyless runs) is hashed from its bytes."""
    keys: Sequence[str | None]
    sys_flags: Sequence[int] | index_bulk.Ints


def _any_rollback(sys_flags: Sequence[int] | index_bulk.Ints) -> bool:
    """Whether any SYSFLAG is a ROLLBACK's (those messages are not indexed)."""
    if isinstance(sys_flags, np.ndarray):
        return bool(((sys_flags & _ROLLBACK) == _ROLLBACK).any())
    return _ROLLBACK in set(map(_ROLLBACK.__and__, sys_flags))


def _one_key_each(keys: Sequence[str | None]) -> bool:
    """Whether ``keys`` is a byte column of reput's keyed runs (``keyed_properties.py``),
    holding one non-empty key each (no space): told from the bytes, with no str made."""
    if isinstance(keys, RaggedKeys):
        empty = not len(keys) or int(keys.lengths.min()) < 1
    elif isinstance(keys, FixedKeys):
        empty = keys.width < 1
    else:
        return False
    return not empty and not bool((keys.grid == ord(KEY_SEPARATOR)).any())


def _hashes(prefix_hash: int, keys: Sequence[str]) -> index_bulk.Ints:
    """The index hashes of ``keys`` of one topic: from their bytes when they are a byte
    column (no str made), else ``index_hash_array``."""
    if isinstance(keys, FixedKeys):
        return index_hashes_of_grid(prefix_hash, keys.grid)
    if isinstance(keys, RaggedKeys):
        return index_hashes_of_ragged(prefix_hash, keys.grid, keys.lengths)
    return index_hash_array(prefix_hash, keys)


class _Indexable(NamedTuple):
    """An :class:`Indexable` made of columns (the runs ``IndexColumns`` cannot take whole)."""

    topic: str
    phys_offset: int
    store_timestamp: int
    uniq_key: str | None
    keys: str | None
    sys_flag: int


class IndexService:
    """Every index file of one store, oldest first.

    Thread-safety: one writer (``build_index``, ``flush``, ``load``, ``close``,
    ``destroy_all``); concurrent ``query``/``files``/``check`` readers and one concurrent
    ``delete_expired`` caller are safe.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        hash_slots: int = DEFAULT_HASH_SLOTS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Clock | None = None,
        *,
        on_file_filled: Callable[[int], None] | None = None,
        readonly: bool = False,
    ) -> None:
        """Describe the service; nothing is read until :meth:`load`.

        Args:
            root: the store root; files live in ``<root>/index``.
            hash_slots, max_entries: dimensions of every file (RocketMQ defaults).
            clock: names new files; defaults to the system clock.
            on_file_filled: called with a full file's end timestamp once that file is flushed
                (store it as the checkpoint's ``indexMsgTimestamp``).
            readonly: map files read-only (tools); building then raises.
        """
        self._root = Path(root)
        self._dir = os.path.join(os.fspath(root), "index")
        #: Files :meth:`load` could not open, with why (the index is then rebuilt).
        self.damaged_files: list[tuple[str, str]] = []
        self._hash_slots = hash_slots
        self._max_entries = max_entries
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._on_file_filled = on_file_filled
        self._readonly = readonly
        self._lock = threading.Lock()
        self._files: list[IndexFile] = []  # copy-on-write; replaced, never mutated
        self._prefix_hashes: dict[str, int] = {}
        self.last_filled_end_timestamp = 0
        """End timestamp of the last file that filled up and was flushed (0 = none yet)."""

    # ------------------------------------------------------------------ load / lifetime

    @property
    def directory(self) -> str:
        return self._dir

    @property
    def files(self) -> list[IndexFile]:
        """The loaded files, oldest first (a copy)."""
        return list(self._files)

    def load(self, last_exit_ok: bool, index_msg_timestamp: int) -> list[str]:
        """Open every index file in name order (startup step 3, spec 5.4).

        Args:
            last_exit_ok: False after a crash (the ``abort`` file was left behind).
            index_msg_timestamp: the checkpoint's ``indexMsgTimestamp``.

        Returns:
            Names of files destroyed because the last exit was abnormal and their end
            timestamp is after ``index_msg_timestamp`` (their entries get rebuilt by reput).
            A read-only service leaves such files on disk and only skips them.

        A file that does not open is left out (:meth:`_open_file`).

        Raises:
            StoreError: already loaded.
        """
        if self._files:
            raise StoreError(f"{self._dir}: index files already loaded")
        try:
            names = sorted(n for n in os.listdir(self._dir) if _is_index_name(n))
        except FileNotFoundError:
            names = []
        loaded: list[IndexFile] = []
        dropped: list[str] = []
        if names and os.path.getsize(os.path.join(self._dir, names[-1])) == 0:
            # A crash inside IndexFile.create, between creating the file and sizing it,
            # leaves an empty newest file: it held nothing, so it goes (as spec 2.2 does
            # for an empty last CommitLog segment). A reader only skips it.
            name = names.pop()
            if not self._readonly:
                log.warning("%s: deleting empty index file left by a crash", name)
                os.unlink(os.path.join(self._dir, name))
            dropped.append(name)
        try:
            for name in names:
                f = self._open_file(name)
                if f is None:
                    continue
                if not last_exit_ok and f.end_timestamp > index_msg_timestamp:
                    if self._readonly:
                        f.close()
                    else:
                        f.destroy()
                    dropped.append(name)
                    continue
                loaded.append(f)
        except BaseException:
            for f in loaded:
                f.close()
            raise
        with self._lock:
            self._files = loaded
        return dropped

    def _open_file(self, name: str) -> IndexFile | None:
        """Open one file for :meth:`load`; a file that does not open (wrong size for the
        dimensions, a header past them: cut short or damaged) is recorded in
        :attr:`damaged_files` and, unless read-only, moved to ``rebuild/trash``. The index is
        then damaged and gets rebuilt (``derived_start``); its other files keep serving."""
        path = os.path.join(self._dir, name)
        try:
            return IndexFile.open(
                path, self._hash_slots, self._max_entries, readonly=self._readonly
            )
        except CorruptIndexError as exc:
            self.damaged_files.append((name, str(exc).removeprefix(f"{path}: ")))
            log.error("index file %s is damaged: %s", name, exc)
            if not self._readonly:
                moved = rebuild_dir.set_aside(self._root, Path(path))
                log.warning("index file %s moved to %s", name, moved)
            return None

    def flush(self) -> None:
        """Force the newest file to disk (full files are flushed when they fill). Writer only."""
        files = self._files
        if files and not self._readonly:
            files[-1].flush()

    def close(self) -> None:
        """Flush and unmap every file. Writer only; the service can be loaded again after."""
        with self._lock:
            files, self._files = self._files, []
        for f in files:
            f.close()

    def destroy_all(self) -> None:
        """Delete every index file (before a rebuild). Writer only."""
        self._check_writable()
        with self._lock:
            files, self._files = self._files, []
        for f in files:
            f.destroy()
        self.last_filled_end_timestamp = 0

    def drop_newest(self, count: int) -> list[str]:
        """Delete the ``count`` newest files; recovery then re-indexes their range from the
        CommitLog (their entries may point past a truncated tail). Writer only.

        Returns:
            The names of the deleted files.
        """
        self._check_writable()
        if count <= 0:
            return []
        with self._lock:
            dropped = self._files[-count:]
            self._files = self._files[:-count]
        for f in dropped:
            f.destroy()
        return [f.name for f in dropped]

    # ------------------------------------------------------------------ build

    def build_index(
        self,
        topic: str,
        phys_offset: int,
        store_timestamp: int,
        uniq_key: str | None,
        keys: str | None,
        transaction_type: int,
    ) -> int:
        """Index one dispatched message (``CommitLogDispatcherBuildIndex``, spec 4.4).

        Args:
            topic: the message's topic.
            phys_offset: its CommitLog offset.
            store_timestamp: its store time (ms).
            uniq_key: the ``UNIQ_KEY`` property, or None.
            keys: the ``KEYS`` property (space separated), or None.
            transaction_type: the sysflag's transaction bits (the whole sysflag also works):
                ROLLBACK (``& 0xC == 0xC``) messages are not indexed.

        Returns:
            The number of keys written (0 for a skipped message).

        Raises:
            StoreNotWritableError: the service is read-only.
            OSError: a new file cannot be created.

        Writer thread only. Like RocketMQ, the first call creates a file even if the message
        has nothing to index.
        """
        files = self._files
        f = files[-1] if files else None
        if f is None or f.is_full:
            f = self._writable_file()
        # Dedupe after a restart: reput replays messages the newest file already holds.
        if phys_offset < f.end_phys_offset:
            return 0
        if transaction_type & TRANSACTION_ROLLBACK_TYPE == TRANSACTION_ROLLBACK_TYPE:
            return 0
        prefix_hash = self._prefix_hashes.get(topic)
        if prefix_hash is None:
            prefix_hash = self._cache_prefix(topic)
        written = 0
        if uniq_key is not None:
            key_hash = index_hash_with_prefix(prefix_hash, uniq_key)
            if not f.put_key_hash(key_hash, phys_offset, store_timestamp):
                f = self._put_rolling(key_hash, phys_offset, store_timestamp)
            written += 1
        if keys:
            for key in keys.split(KEY_SEPARATOR):
                if key:
                    key_hash = index_hash_with_prefix(prefix_hash, key)
                    if not f.put_key_hash(key_hash, phys_offset, store_timestamp):
                        f = self._put_rolling(key_hash, phys_offset, store_timestamp)
                    written += 1
        return written

    def build_index_many(self, messages: Sequence[Indexable] | IndexColumns) -> int:
        """:meth:`build_index` for each message, in order, with the same resulting files.

        ``messages`` may also come as :class:`IndexColumns` (reput's rows path): the usual
        run (one topic, every message with a UNIQ_KEY and one business key, no rollback,
        nothing below the dedupe floor) is then laid out for hashing with slice assignments
        instead of a loop over the messages.

        The keys of the whole run are hashed first, then written with
        :meth:`IndexFile.put_entries` (one header write per file touched). A file that fills
        up is rolled exactly where the one-by-one calls would roll it: at the next key, or at
        the next message when it filled on a message's last key. ``messages`` must be in
        CommitLog order (reput's), which is what makes the dedupe floor below equivalent to
        :meth:`build_index`'s per-message check.

        Returns:
            The number of keys written.

        Raises:
            StoreNotWritableError, OSError: as :meth:`build_index`.

        Writer thread only.
        """
        if isinstance(messages, IndexColumns):
            return self._build_index_columns(messages)
        return self._build_index_objects(messages)

    def _build_index_objects(self, messages: Sequence[Indexable]) -> int:
        if not messages:
            return 0
        files = self._files
        f = files[-1] if files else None
        if f is None or f.is_full:
            f = self._writable_file()
        floor = f.end_phys_offset  # phys offsets grow along ``messages`` (see above)
        prefix_hashes = self._prefix_hashes
        keys_flat: list[str] = []
        prefixes: list[int] = []
        phys_offsets: list[int] = []
        timestamps: list[int] = []
        for m in messages:
            phys_offset = m.phys_offset
            if phys_offset < floor or m.sys_flag & _ROLLBACK == _ROLLBACK:
                continue
            # The keys build_index writes: UNIQ_KEY if present (even empty), then each
            # non-empty element of KEYS.
            uniq_key = m.uniq_key
            keys = m.keys
            if keys:
                candidates = keys.split(KEY_SEPARATOR)
                if "" in candidates:
                    candidates = [key for key in candidates if key]
                if uniq_key is not None:
                    candidates.insert(0, uniq_key)
            elif uniq_key is not None:
                candidates = [uniq_key]
            else:
                continue
            topic = m.topic
            prefix_hash = prefix_hashes.get(topic)
            if prefix_hash is None:
                prefix_hash = self._cache_prefix(topic)
            count = len(candidates)
            keys_flat += candidates
            prefixes += [prefix_hash] * count
            phys_offsets += [phys_offset] * count
            timestamps += [m.store_timestamp] * count
        return self._write_keys(
            f, prefixes, keys_flat, phys_offsets, timestamps, messages[-1].phys_offset
        )

    def _build_index_columns(self, columns: IndexColumns) -> int:
        topics, phys_offsets, store_timestamps, uniq_keys, keys, sys_flags = columns
        count = len(topics)
        if not count:
            return 0
        files = self._files
        f = files[-1] if files else None
        if f is None or f.is_full:
            f = self._writable_file()
        topic = topics[0]
        keyless = keys.count(None) == count  # keyless Kafka records: UNIQ_KEY alone
        if (
            phys_offsets[0] < f.end_phys_offset  # phys offsets grow: only the first can be
            or topics.count(topic) != count
            or None in uniq_keys
            or (
                not keyless
                and not _one_key_each(keys)
                and (
                    None in keys or "" in keys or KEY_SEPARATOR in "".join(keys)  # type: ignore[arg-type]  # None ruled out
                )
            )
            or _any_rollback(sys_flags)
        ):
            return self._build_index_objects(
                [
                    _Indexable(*fields)
                    for fields in zip(
                        topics, index_bulk.as_ints(phys_offsets),
                        index_bulk.as_ints(store_timestamps), uniq_keys, keys,
                        index_bulk.as_ints(sys_flags), strict=True,
                    )
                ]
            )  # fmt: skip
        prefix_hash = self._prefix_hashes.get(topic)
        if prefix_hash is None:
            prefix_hash = self._cache_prefix(topic)
        # UNIQ_KEYs and business keys hashed as two columns (each of one length, as a rule:
        # index_hash_array's best case), then interleaved: UNIQ_KEY, then the key. The run
        # stays in int64 arrays down to the file (index_bulk.py).
        phys_array = index_bulk.as_array(phys_offsets)
        time_array = index_bulk.as_array(store_timestamps)
        last_phys_offset = int(phys_array[-1])
        if keyless:
            if isinstance(uniq_keys, FixedKeys):  # no str made: hashed from the bytes
                uniq_hashes = index_hashes_of_grid(prefix_hash, uniq_keys.grid)
            else:
                uniq_hashes = index_hash_array(prefix_hash, uniq_keys)  # type: ignore[arg-type]  # None ruled out above
            return self._write_hashes(f, uniq_hashes, phys_array, time_array, last_phys_offset)
        hashes = np.empty(2 * count, np.int64)
        hashes[0::2] = _hashes(prefix_hash, uniq_keys)  # type: ignore[arg-type]
        hashes[1::2] = _hashes(prefix_hash, keys)  # type: ignore[arg-type]
        return self._write_hashes(
            f, hashes, np.repeat(phys_array, 2), np.repeat(time_array, 2), last_phys_offset
        )

    def _write_keys(
        self,
        f: IndexFile,
        prefixes: list[int],
        keys_flat: list[str],
        phys_offsets: list[int],
        timestamps: list[int],
        last_phys_offset: int,
    ) -> int:
        """Hash and write the keys of a run of messages (the last at ``last_phys_offset``)
        from the writable file ``f`` on, rolling as :meth:`build_index` would."""
        return self._write_hashes(
            f,
            index_hashes_with_prefix(prefixes, keys_flat),
            phys_offsets,
            timestamps,
            last_phys_offset,
        )

    def _write_hashes(
        self,
        f: IndexFile,
        hashes: Sequence[int] | index_bulk.Ints,
        phys_offsets: Sequence[int] | index_bulk.Ints,
        timestamps: Sequence[int] | index_bulk.Ints,
        last_phys_offset: int,
    ) -> int:
        """:meth:`_write_keys` with the keys already hashed."""
        done = 0
        while done < len(hashes):
            written = f.put_entries(hashes, phys_offsets, timestamps, done)
            if written == 0:  # only a full file refuses, and full files are rolled
                raise StoreError(f"{f.path}: a new index file refused its first key")
            done += written
            if done < len(hashes):
                f = self._writable_file()
        # build_index rolls at the start of the call after the one that filled the file.
        if f.is_full and f.end_phys_offset != last_phys_offset:
            self._writable_file()
        return len(hashes)

    def _cache_prefix(self, topic: str) -> int:
        if len(self._prefix_hashes) >= _PREFIX_CACHE_LIMIT:
            self._prefix_hashes.clear()
        prefix_hash = java_hash_u32(topic + "#")
        self._prefix_hashes[topic] = prefix_hash
        return prefix_hash

    def _put_rolling(self, key_hash: int, phys_offset: int, store_timestamp: int) -> IndexFile:
        """The newest file was full: roll (spec 4.6) and put into the new file."""
        f = self._writable_file()
        if not f.put_key_hash(key_hash, phys_offset, store_timestamp):
            raise StoreError(f"{f.path}: a new index file refused its first key")
        return f

    def _writable_file(self) -> IndexFile:
        """``getAndCreateLastIndexFile``: the newest file, or a new one if none or it is full."""
        files = self._files
        if files and not files[-1].is_full:
            return files[-1]
        self._check_writable()
        full = files[-1] if files else None
        os.makedirs(self._dir, exist_ok=True)
        f = IndexFile.create(
            self._new_path(),
            self._hash_slots,
            self._max_entries,
            prev_end_phys_offset=full.end_phys_offset if full else 0,
            prev_end_timestamp=full.end_timestamp if full else 0,
        )
        with self._lock:
            self._files = [*self._files, f]
        if full is not None:
            self._flush_filled(full)
        return f

    def _flush_filled(self, full: IndexFile) -> None:
        full.flush()
        end_timestamp = full.end_timestamp
        self.last_filled_end_timestamp = end_timestamp
        if self._on_file_filled is not None:
            self._on_file_filled(end_timestamp)

    def _new_path(self) -> str:
        name = file_name_for(self._clock.now_ms())
        files = self._files
        if files and name <= files[-1].name:
            name = _name_after(files[-1].name)
        while os.path.exists(os.path.join(self._dir, name)):
            name = _name_after(name)
        return os.path.join(self._dir, name)

    def _check_writable(self) -> None:
        if self._readonly:
            raise StoreNotWritableError(f"{self._dir}: index opened read-only")

    # ------------------------------------------------------------------ query

    def query(
        self, topic: str, key: str, max_count: int, begin_ms: int, end_ms: int
    ) -> QueryResult:
        """CommitLog offsets of messages indexed under ``topic#key`` in [begin_ms, end_ms].

        ``IndexService.queryOffset`` (spec 4.7): at most ``min(max_count, 64)`` offsets, files
        newest to oldest, each file's chain newest to oldest. Only key hashes are compared:
        callers must check the message's real keys. Thread-safe.

        Returns:
            The offsets plus the newest file's end timestamp and end phys offset (0 and 0 when
            there is no file).
        """
        max_count = min(max_count, MAX_QUERY_COUNT)
        files = self._files
        if not files:
            return QueryResult([], 0, 0)
        newest = files[-1]
        last_timestamp = newest.end_timestamp
        last_phys_offset = newest.end_phys_offset
        key_hash = index_hash_with_prefix(java_hash_u32(topic + "#"), key)
        offsets: list[int] = []
        for f in reversed(files):
            if f.is_time_matched(begin_ms, end_ms):
                f.select_by_hash(key_hash, max_count, begin_ms, end_ms, offsets)
            if f.begin_timestamp < begin_ms or len(offsets) >= max_count:
                break
        return QueryResult(offsets, last_timestamp, last_phys_offset)

    # ------------------------------------------------------------------ cleanup / check

    def delete_expired(self, min_commitlog_offset: int) -> int:
        """Delete the oldest files whose end phys offset < ``min_commitlog_offset`` (spec 6.5).

        Never deletes the newest file. Safe on a cleanup thread while reput writes.

        Returns:
            The number of files deleted.
        """
        files = self._files
        expired: list[IndexFile] = []
        for f in files[:-1]:
            if f.end_phys_offset >= min_commitlog_offset:
                break
            expired.append(f)
        if not expired:
            return 0
        self._check_writable()
        gone = {id(f) for f in expired}
        with self._lock:
            self._files = [f for f in self._files if id(f) not in gone]
        for f in expired:
            f.destroy()
        return len(expired)

    def check(self) -> list[str]:
        """Walk every file for structural defects (see ``IndexFile.check``), plus file order.

        Returns:
            One line per defect, each naming its file; empty when everything is sound.
        """
        files = self._files
        defects: list[str] = []
        for older, newer in zip(files, files[1:], strict=False):
            if newer.index_count > 1 and newer.begin_phys_offset < older.end_phys_offset:
                defects.append(
                    f"{newer.name}: begin_phys_offset {newer.begin_phys_offset} < "
                    f"{older.name} end_phys_offset {older.end_phys_offset}"
                )
        for f in files:
            defects.extend(f.check())
        return defects
