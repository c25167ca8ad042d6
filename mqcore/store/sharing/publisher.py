"""Publisher: the offsets this process publishes for the others (``progress.py``'s slots).

The CommitLog writer (standalone or broker role) publishes MAX_OFFSET, FLUSHED_OFFSET and
CONFIRM_OFFSET after every append, once the bytes are in the shared mapping; the reput
holder (standalone or an attached services process) publishes REPUT_OFFSET and the
checkpoint times after each pass. Invariant: a published offset is raised only after what
it covers is in place, and each slot only rises (another writer's later end is published
by that writer). A read-only store has no progress file: every method is then a no-op.
Crash behaviour: nothing here is durable; the next writer's open publishes afresh.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from mqcore.store.commit_log import CommitLog
from mqcore.store.config import StoreConfig
from mqcore.store.files.space import quietly
from mqcore.store.recovery.checkpoint import Checkpoint
from mqcore.store.sharing.progress import Progress, Slot, publish_config

_MAX = Slot.MAX_OFFSET
_FLUSHED = Slot.FLUSHED_OFFSET
_CONFIRM = Slot.CONFIRM_OFFSET


class Publisher:
    """Publishes what ``commit_log`` and this process's reput reached into ``progress``.

    Args:
        progress: the shared slots; None for a read-only store (nothing is published).
        commit_log: the store's CommitLog (its end and flushed offset are published).
        config: the flush mode (under sync flush the confirm offset is the flushed one).
        root: the store directory (``store.json`` is published beside the slots).
    """

    def __init__(
        self, progress: Progress | None, commit_log: CommitLog, config: StoreConfig, root: Path
    ) -> None:
        self.progress = progress
        self._commit_log = commit_log
        self._config = config
        self._root = root
        self._sync = config.flush == "sync"
        self._lock = threading.Lock()

    def append(self, end: int = -1) -> None:
        """After an append (or a sync flush): the CommitLog end the writer reached.

        Args:
            end: the end of the caller's append when it knows it (the put path), else -1
                to read it. Thread-safe (the three slots rise together under a lock).
        """
        progress = self.progress
        if progress is None:
            return
        commit_log = self._commit_log
        if end < 0:
            end = commit_log.max_offset
        flushed = commit_log.flushed_offset
        confirm = flushed if self._sync else end  # CommitLog.confirm_offset, without the chain
        raise_to = progress.raise_to
        with self._lock:
            raise_to(_MAX, end)
            raise_to(_FLUSHED, flushed)
            raise_to(_CONFIRM, confirm)

    def reput(self, reput_offset: int, checkpoint: Checkpoint) -> None:
        """After a reput pass (services and standalone): what the followers may now show."""
        progress = self.progress
        if progress is None:
            return
        progress.raise_to(Slot.REPUT_OFFSET, reput_offset)
        progress.raise_to(Slot.LOGICS_TIMESTAMP, checkpoint.logics_msg_timestamp)
        progress.raise_to(Slot.INDEX_TIMESTAMP, checkpoint.index_msg_timestamp)

    def writer_opened(self, end: int, last_exit_ok: bool, *, reput_offset: int | None) -> None:
        """After the CommitLog writer's recovery: its offsets and a new generation, for the
        followers (the reput holder attaches to it, tools and workers started later).

        Args:
            end: the recovered CommitLog end.
            last_exit_ok: whether the previous writer closed cleanly.
            reput_offset: a standalone writer's own dispatch position (it is its own reput
                holder); None for the broker role, whose worker attaches to the generation.
        """
        progress = self.progress
        if progress is None:
            return
        for slot in (_MAX, _CONFIRM, _FLUSHED, Slot.RECOVERED_END):
            progress.set(slot, end)
        progress.set(Slot.LAST_EXIT_OK, 1 if last_exit_ok else 0)
        progress.set(Slot.WRITER_PID, os.getpid())
        if reput_offset is None:
            progress.increment(Slot.GENERATION)  # last: the offsets above belong to it
            publish_config(self._root, self._config)
            return
        progress.set(Slot.REPUT_OFFSET, reput_offset)
        generation = progress.increment(Slot.GENERATION)
        progress.set(Slot.REPUT_GENERATION, generation)
        quietly(  # the workers keep the geometry published last time
            lambda: publish_config(self._root, self._config),
            f"store {self._root}: store.json not published",
        )

    def writer_closed(self) -> None:
        """The writer is gone: its last end, and no writer pid."""
        self.append()
        if self.progress is not None:
            self.progress.set(Slot.WRITER_PID, 0)
