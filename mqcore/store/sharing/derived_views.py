"""DerivedViews: this process's view of the derived files (ConsumeQueues, index, checkpoint).

A standalone store keeps one view for its whole life. A follower (``follower.py``) and a
rebuild's swap replace the views when another process or a rebuild changed the files; a
replaced view stays open :data:`RETIRE_AFTER_S` for readers that picked it up just before
(a closed view would read as "file gone" and send a consumer past messages), then closes.

Everything that reads ``store.queues``, ``store.index`` or ``store.checkpoint`` reads them
from here at call time, so a replacement is seen by the next call. Thread-safety: replacing
is done under the owner's follow or reput lock; reading is lock-free (one attribute read).
Crash behaviour: nothing here is durable beyond the files the views map.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from mqcore.clock import Clock
from mqcore.store.config import StoreConfig
from mqcore.store.consume_queue import ConsumeQueue
from mqcore.store.consume_queue_store import ConsumeQueueStore
from mqcore.store.index.index_service import IndexService
from mqcore.store.recovery.checkpoint import Checkpoint

#: Views a follower replaced stay open this long for readers that picked them up just
#: before (a closed view would read as "file gone" and send a consumer past messages).
RETIRE_AFTER_S = 5.0

#: What a follower (or a rebuild's swap) replaces and closes later.
type View = ConsumeQueueStore | IndexService | ConsumeQueue


class DerivedViews:
    """The ConsumeQueues, index and checkpoint of the store at ``root`` as this process sees
    them, and the replaced views waiting to be closed.

    Args:
        root: the store directory.
        config: segment sizes and index geometry.
        clock: time source of the views.
        readonly: whether the first views map the files read-only (a read-only store, or a
            broker whose worker writes them).
        monotonic: the time source of the retirement delay (real time even under a test's
            FakeClock: the delay protects readers on other threads).
    """

    def __init__(
        self,
        root: Path,
        config: StoreConfig,
        clock: Clock,
        *,
        readonly: bool,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.config = config
        self.clock = clock
        self.checkpoint = Checkpoint(root / "checkpoint")
        self.queues = self.new_queues(readonly=readonly)
        self.index = self.new_index(readonly=readonly)
        self._monotonic = monotonic
        self._retired: list[tuple[float, View]] = []

    def new_queues(self, *, readonly: bool) -> ConsumeQueueStore:
        """A ConsumeQueueStore over the store's queues, not loaded."""
        return ConsumeQueueStore(
            self.root,
            file_size_bytes=self.config.consume_queue_file_size,
            readonly=readonly,
            clock=self.clock,
        )

    def new_index(self, *, readonly: bool, root: os.PathLike[str] | None = None) -> IndexService:
        """An IndexService over the store's index files (or those under ``root``, a rebuild's
        side directory), not loaded. A filled file moves the checkpoint's index time."""
        return IndexService(
            self.root if root is None else root,
            self.config.index_hash_slots,
            self.config.index_max_entries,
            self.clock,
            on_file_filled=self._index_file_filled,
            readonly=readonly,
        )

    def _index_file_filled(self, end_timestamp: int) -> None:
        self.checkpoint.index_msg_timestamp = end_timestamp

    def load_checkpoint(self) -> Checkpoint:
        """Read the checkpoint file again (another process may have written it)."""
        self.checkpoint = Checkpoint.load(self.root / "checkpoint")
        return self.checkpoint

    def replace(
        self,
        queues: ConsumeQueueStore | None = None,
        index: IndexService | None = None,
        *,
        close_old: bool = False,
    ) -> None:
        """Install new views; the old ones are retired (closed later), or closed now with
        ``close_old`` (the caller knows no reader can hold them)."""
        old: list[View] = []
        if queues is not None:
            old.append(self.queues)
            self.queues = queues
        if index is not None:
            old.append(self.index)
            self.index = index
        if close_old:
            for view in old:
                view.close()
        else:
            self.retire(*old)

    def retire(self, *views: View) -> None:
        """Close views replaced more than RETIRE_AFTER_S ago; keep these for later."""
        now = self._monotonic()
        keep: list[tuple[float, View]] = []
        for since, view in self._retired:
            if now - since >= RETIRE_AFTER_S:
                view.close()
            else:
                keep.append((since, view))
        keep += [(now, view) for view in views]
        self._retired = keep

    @property
    def retired_count(self) -> int:
        """Replaced views not closed yet."""
        return len(self._retired)

    def close_retired(self) -> None:
        """Close every replaced view now (the store is closing)."""
        for _since, view in self._retired:
            view.close()
        self._retired = []

    def close(self) -> None:
        """Close the replaced views, then the index and the queues."""
        self.close_retired()
        self.index.close()
        self.queues.close()
