"""ConsumeQueueStore: every ConsumeQueue of a store, ``<root>/consumequeue/<topic>/<queueId>/``.

It loads the queue directories (spec 5.4 step 2: directory names that are not integers are
ignored), creates queues on first dispatch, and applies store-wide passes to all of them:
recovery, truncation past a CommitLog end (5.8), flushing (6.3) and cleanup (6.5).

Damage does not stop a load: a queue whose files are cut short is loaded (its files extended
with zeros) and noted in ``damaged``; one whose files cannot be loaded at all (a file missing
in the middle, one too long) is moved to ``rebuild/trash`` and noted too. The start check
(``derived_start.py``) has them rebuilt from the CommitLog; a rebuilt queue is put in place
with :meth:`ConsumeQueueStore.replace`, which cleanup passes never race (they skip a queue
that is no longer the current one: its file paths are now the rebuilt queue's).

Thread-safety: one writer (the reput thread) and many readers; the table of queues is
guarded by a lock, each queue documents its own rules (``consume_queue.py``).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

from mqcore.clock import Clock
from mqcore.errors import StoreError
from mqcore.store.consume_queue import (
    DEFAULT_FILE_SIZE_BYTES,
    ConsumeQueue,
    round_file_size,
)
from mqcore.store.recovery import rebuild_dir

log = logging.getLogger(__name__)
_QUEUE_DIR_NAME = re.compile(r"0|[1-9][0-9]*")


class QueueUnitSource(Protocol):
    """What :meth:`ConsumeQueueStore.put_many` reads from a dispatched record
    (``record.DispatchRequest`` has these attributes)."""

    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def phys_offset(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def tags_code(self) -> int: ...
    @property
    def queue_offset(self) -> int: ...


class ConsumeQueueStore:
    """All consume queues of a store, under ``<root>/consumequeue/<topic>/<queueId>/``.

    Thread-safety: the topic table is guarded by a lock; ``find_or_create``, ``get``,
    ``topics``, ``queues`` and ``max_phys_offset`` are thread-safe. ``load``,
    ``recover_all`` and ``truncate_dirty`` run at startup (or with reput stopped);
    ``flush_all`` on the flusher thread; ``clean_expired``, ``destroy_expired_queues`` and
    ``delete_topic`` on the cleaner thread.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        file_size_bytes: int = DEFAULT_FILE_SIZE_BYTES,
        readonly: bool = False,
        clock: Clock | None = None,
    ) -> None:
        """Args: the store root, the queue file size (rounded up to 20), read-only mode
        and the clock for forced unmaps."""
        self.root = Path(root)
        self.directory = self.root / "consumequeue"
        self.file_size = round_file_size(file_size_bytes)
        self.readonly = readonly
        self._clock = clock
        self._table: dict[str, dict[int, ConsumeQueue]] = {}
        self._lock = threading.Lock()
        #: Serialises :meth:`replace` with the passes that delete files (cleanup).
        self._files_lock = threading.RLock()
        #: Queues ``load`` found damaged, and why (``derived_start`` has them rebuilt).
        self.damaged: dict[tuple[str, int], str] = {}
        #: Queues ``load`` found files of (recovery may create others by dispatching).
        self.loaded: set[tuple[str, int]] = set()
        #: Called with a topic :meth:`delete_topic` deleted (the store forgets its offsets).
        self.on_topic_deleted: Callable[[str], None] | None = None

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        if not topic or "/" in topic or "\0" in topic or topic in (".", ".."):
            raise ValueError(f"topic {topic!r} cannot name a directory")
        return ConsumeQueue(
            self.directory, topic, queue_id, self.file_size,
            readonly=self.readonly, clock=self._clock,
        )  # fmt: skip

    def load(self) -> None:
        """Load every ``<topic>/<queueId>`` directory (spec 5.4 step 2).

        Queue directories whose names are not canonical non-negative integers are ignored.
        A queue whose files are inconsistent (``MappedFileQueue.load`` raises) or cut short is
        recorded in :attr:`damaged` instead of stopping the load (``_load_queue``).
        """
        if not self.directory.is_dir():
            return
        for topic_dir in sorted(self.directory.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if not (queue_dir.is_dir() and _QUEUE_DIR_NAME.fullmatch(queue_dir.name)):
                    log.info("ignoring %s: not a queue directory", queue_dir)
                    continue
                queue = self._new_queue(topic_dir.name, int(queue_dir.name))
                if not self._load_queue(queue):
                    continue
                self.loaded.add((queue.topic, queue.queue_id))
                with self._lock:
                    self._table.setdefault(queue.topic, {})[queue.queue_id] = queue

    def _load_queue(self, queue: ConsumeQueue) -> bool:
        """Load one queue; a queue whose files are inconsistent or cut short is recorded in
        :attr:`damaged` (its rebuild replaces it). One that cannot be loaded at all is set
        aside (``rebuild/trash``) unless read-only, and False returned: a fresh directory
        may then be written while it is rebuilt."""
        key = (queue.topic, queue.queue_id)
        try:
            queue.load()
        except StoreError as exc:
            queue.close()
            self.damaged[key] = f"its files cannot be loaded ({exc})"
            log.error("consume queue %s-%d: %s", *key, self.damaged[key])
            if not self.readonly:
                moved = rebuild_dir.set_aside(self.root, queue.directory)
                log.warning("consume queue %s-%d: files moved to %s", *key, moved)
            return False
        extended = queue.segments.extended_files
        if extended:
            cut = ", ".join(f"{path.name} ({length} bytes)" for path, length in extended)
            self.damaged[key] = f"file(s) cut short: {cut}"
        return True

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, created (without files: the first ``put`` makes one) if new."""
        with self._lock:
            queues = self._table.setdefault(topic, {})
            queue = queues.get(queue_id)
            if queue is None:
                queue = queues[queue_id] = self._new_queue(topic, queue_id)
            return queue

    def discover(self, topic: str | None = None, queue_id: int | None = None) -> list[ConsumeQueue]:
        """Load queues another process created since ``load`` (Celery mode followers).

        With ``topic`` and ``queue_id`` only that queue's directory is looked at (one stat),
        else the whole ``consumequeue`` tree. New queues are loaded as followers: their last
        file is marked empty for :meth:`ConsumeQueue.follow` to scan.

        Returns:
            The queues added.
        """
        if topic is not None and queue_id is not None:
            wanted = (
                [(topic, queue_id)] if (self.directory / topic / str(queue_id)).is_dir() else []
            )
        elif self.directory.is_dir():
            wanted = [
                (topic_dir.name, int(queue_dir.name))
                for topic_dir in sorted(self.directory.iterdir())
                if topic_dir.is_dir()
                for queue_dir in sorted(topic_dir.iterdir())
                if queue_dir.is_dir() and _QUEUE_DIR_NAME.fullmatch(queue_dir.name)
            ]
        else:
            wanted = []
        added: list[ConsumeQueue] = []
        for name, qid in wanted:
            if self.get(name, qid) is not None:
                continue
            queue = self._new_queue(name, qid)
            if not self._load_queue(queue):
                continue
            queue.segments.reset_last_for_follow()
            with self._lock:
                if self._table.setdefault(name, {}).setdefault(qid, queue) is not queue:
                    queue.close()
                    continue
            added.append(queue)
        return added

    def put_many(self, records: Iterable[QueueUnitSource]) -> int:
        """Write the units of dispatched records to their queues (reput's batch path).

        Groups the records by (topic, queue_id), keeping their order inside each queue, and
        hands each group to :meth:`ConsumeQueue.put_many`: the queue files end up exactly as
        with one :meth:`ConsumeQueue.put` per record. Writer (reput) thread only.

        Returns:
            How many units were written.
        """
        groups: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
        for r in records:
            key = (r.topic, r.queue_id)
            units = groups.get(key)
            if units is None:
                units = groups[key] = []
            units.append((r.phys_offset, r.size, r.tags_code, r.queue_offset))
        written = 0
        for (topic, queue_id), units in groups.items():
            written += self.find_or_create(topic, queue_id).put_many(units)
        return written

    def put_columns(
        self,
        topics: Sequence[str],
        queue_ids: Sequence[int],
        phys_offsets: Sequence[int],
        sizes: Sequence[int],
        tags_codes: Sequence[int],
        queue_offsets: Sequence[int],
    ) -> int:
        """:meth:`put_many` given as columns (reput's rows path). A run of one queue, the
        usual case, goes to :meth:`ConsumeQueue.put_run` whole; a mixed run is grouped by
        queue as in :meth:`put_many`. Writer (reput) thread only.

        Returns:
            How many units were written.
        """
        count = len(topics)
        if not count:
            return 0
        if topics.count(topics[0]) == count and queue_ids.count(queue_ids[0]) == count:
            queue = self.find_or_create(topics[0], queue_ids[0])
            return queue.put_run(phys_offsets, sizes, tags_codes, queue_offsets)
        groups: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
        for topic, queue_id, phys_offset, size, tags_code, queue_offset in zip(
            topics, queue_ids, phys_offsets, sizes, tags_codes, queue_offsets, strict=True
        ):
            key = (topic, queue_id)
            units = groups.get(key)
            if units is None:
                units = groups[key] = []
            units.append((phys_offset, size, tags_code, queue_offset))
        written = 0
        for (topic, queue_id), units in groups.items():
            written += self.find_or_create(topic, queue_id).put_many(units)
        return written

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue if known."""
        with self._lock:
            return self._table.get(topic, {}).get(queue_id)

    def topics(self) -> list[str]:
        """Known topics, sorted."""
        with self._lock:
            return sorted(self._table)

    def queues(self, topic: str) -> dict[int, ConsumeQueue]:
        """A snapshot of the topic's queues by queue id (empty if unknown)."""
        with self._lock:
            return dict(sorted(self._table.get(topic, {}).items()))

    def _all(self) -> list[ConsumeQueue]:
        with self._lock:
            return [q for queues in self._table.values() for q in queues.values()]

    def recover_all(self) -> None:
        """Recover every queue (spec 3.2, startup step 4)."""
        for queue in self._all():
            queue.recover()

    def max_phys_offset(self) -> int:
        """Max ``max_phys_offset`` over all queues, -1 if none (``dispatchFromPhyOffset``)."""
        return max((queue.max_phys_offset for queue in self._all()), default=-1)

    def truncate_dirty(self, phys_offset: int) -> None:
        """Truncate every queue to ``phys_offset`` if any points at or beyond it (5.8)."""
        if self.max_phys_offset() >= phys_offset:
            for queue in self._all():
                queue.truncate_dirty(phys_offset)

    def flush_all(self, least_pages: int) -> bool:
        """Flush every queue once (spec 6.3). Returns whether any made progress."""
        progressed = False
        for queue in self._all():
            progressed = queue.flush(least_pages) or progressed
        return progressed

    def delete_topic(self, topic: str) -> bool:
        """Destroy all the topic's queues and remove its directory if empty.

        Returns:
            Whether the topic was known.
        """
        if self.on_topic_deleted is not None:
            self.on_topic_deleted(topic)
        with self._files_lock:
            with self._lock:
                queues = self._table.pop(topic, None)
            if queues is None:
                return False
            for queue in queues.values():
                queue.destroy()
        try:
            (self.directory / topic).rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            log.warning("%s: not removed, it holds other entries", self.directory / topic)
        return True

    def replace(self, queue: ConsumeQueue) -> ConsumeQueue | None:
        """Put ``queue`` (loaded from files just swapped in) in the place of the queue of the
        same topic and id. Returns the queue replaced: its files were renamed away, so the
        caller closes it once its readers are done (``DerivedViews.retire``); no cleanup pass
        deletes through it meanwhile (cleanup skips queues that are no longer current).
        Writer thread, with reput paused."""
        with self._files_lock, self._lock:
            queues = self._table.setdefault(queue.topic, {})
            old = queues.get(queue.queue_id)
            queues[queue.queue_id] = queue
            return old

    def _is_current(self, queue: ConsumeQueue) -> bool:
        return self.get(queue.topic, queue.queue_id) is queue

    def clean_expired(self, min_commitlog_offset: int) -> int:
        """The periodic consume-queue cleaning of spec 6.5, for every queue.

        Deletes expired front files then corrects each queue's min offset. The spec runs it
        only when the CommitLog min offset grew since the last run and pauses 100 ms after a
        queue that deleted something: both are the caller's (cleanup service) business.

        Returns:
            How many files were deleted in total.
        """
        deleted = 0
        for queue in self._all():
            with self._files_lock:
                if not self._is_current(queue):
                    continue  # replaced by a rebuilt queue meanwhile: its paths are the new one's
                deleted += queue.delete_expired_files(min_commitlog_offset)
                queue.correct_min_offset(min_commitlog_offset)
        return deleted

    def destroy_expired_queues(
        self, min_commitlog_offset: int, *, keep_topic: Callable[[str], bool] | None = None
    ) -> int:
        """Admin ``cleanExpired`` (spec 6.5): destroy queues whose last unit points below
        the CommitLog min, except topics ``keep_topic`` protects (system topics).

        Returns:
            How many queues were destroyed.
        """
        destroyed = 0
        for topic in self.topics():
            if keep_topic is not None and keep_topic(topic):
                continue
            for queue_id, queue in self.queues(topic).items():
                last = queue.last_unit()
                if last is None or last.phys_offset >= min_commitlog_offset:
                    continue
                with self._files_lock:
                    if not self._is_current(queue):
                        continue
                    with self._lock:
                        self._table.get(topic, {}).pop(queue_id, None)
                        if not self._table.get(topic, True):
                            del self._table[topic]
                    queue.destroy()
                destroyed += 1
        return destroyed

    def close(self) -> None:
        """Unmap every queue's files (shutdown)."""
        for queue in self._all():
            queue.close()

    def destroy(self) -> None:
        """Delete every queue (spec 5.6: no CommitLog files at all)."""
        for topic in self.topics():
            self.delete_topic(topic)
