"""TieredStorage: what one store's tier is made of, shared by the upload dispatcher, the
reader (:mod:`mqcore.tiered.tiered_store`) and retention.

* the segment backend,
* the progress metadata (``<store>/config/tieredStoreMetadata.json``),
* one :class:`FlatFile` per queue the tier holds, created on first use (resuming from the
  metadata, which reconciles the backend with it),
* the key index (:mod:`mqcore.tiered.key_index`).

A *writer* (the process that runs the dispatcher: the broker inline, a worker in Celery
mode) owns the backend. A *reader* (``readonly=True``: the broker in Celery mode) never
reconciles or writes; it re-reads the metadata when the file changed (checked at most every
``refresh_interval_s``) and re-opens its flat files from it, so it serves what the writer
committed.

Thread-safety: every method is thread-safe (one lock around the table of flat files).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from mqcore.clock import Clock, SystemClock
from mqcore.tiered.backend import SegmentBackend
from mqcore.tiered.config import TieredConfig
from mqcore.tiered.flat_file import FlatFile
from mqcore.tiered.key_index import KeyIndex
from mqcore.tiered.metadata import TieredMetadataStore

log = logging.getLogger(__name__)

REFRESH_INTERVAL_S = 0.2


class TieredStorage:
    """See the module docstring.

    Args:
        backend: where segments live.
        store_root: the local store directory (the metadata lives in its ``config``).
        config: tier settings.
        clock: time source (segment times, group-commit timeout, retention).
        readonly: a reader beside another process's writer.
    """

    def __init__(
        self,
        backend: SegmentBackend,
        store_root: str | os.PathLike[str],
        config: TieredConfig | None = None,
        *,
        clock: Clock | None = None,
        readonly: bool = False,
        refresh_interval_s: float = REFRESH_INTERVAL_S,
    ) -> None:
        self.backend = backend
        self.store_root = Path(store_root)
        self.config = config or TieredConfig()
        self.clock: Clock = clock or SystemClock()
        self.readonly = readonly
        self.metadata = TieredMetadataStore(store_root).load()
        self.key_index = KeyIndex(backend, self.config.key_index_segment_bytes, readonly=readonly)
        self._files: dict[tuple[str, int], FlatFile] = {}
        self._lock = threading.Lock()
        self._refresh_interval_s = refresh_interval_s
        self._checked_at = time.monotonic()
        self._stamp = self._metadata_stamp()

    def _metadata_stamp(self) -> tuple[int, int]:
        try:
            st = self.metadata.path.stat()
        except FileNotFoundError:
            return (0, 0)
        return (st.st_mtime_ns, st.st_size)

    def refresh(self) -> None:
        """Reader: reload the metadata if the writer saved it since (rate-limited)."""
        if not self.readonly:
            return
        now = time.monotonic()
        if now - self._checked_at < self._refresh_interval_s:
            return
        self._checked_at = now
        stamp = self._metadata_stamp()
        if stamp == self._stamp:
            return
        with self._lock:
            self.metadata.load()
            self._files.clear()
            self._stamp = stamp

    def flat_file(self, topic: str, queue_id: int) -> FlatFile | None:
        """The queue's flat file, or None when the tier has never held the queue."""
        self.refresh()
        with self._lock:
            found = self._files.get((topic, queue_id))
            if found is not None:
                return found
            if self.metadata.get(topic, queue_id) is None:
                return None
            return self._open_locked(topic, queue_id, 0)

    def create_flat_file(self, topic: str, queue_id: int, start_offset: int) -> FlatFile:
        """The queue's flat file, starting at ``start_offset`` if the tier does not know it.

        Raises:
            TieredStoreError: resuming found the backend behind the metadata.
        """
        with self._lock:
            found = self._files.get((topic, queue_id))
            return found or self._open_locked(topic, queue_id, start_offset)

    def _open_locked(self, topic: str, queue_id: int, start_offset: int) -> FlatFile:
        flat = FlatFile(
            self.backend,
            self.metadata,
            topic,
            queue_id,
            self.config,
            clock=self.clock,
            start_queue_offset=start_offset,
            readonly=self.readonly,
        )
        self._files[(topic, queue_id)] = flat
        return flat

    def drop(self, topic: str, queue_id: int) -> None:
        """Forget the queue's flat file and key-index state after a failed upload: the next
        use resumes from the saved metadata (``FlatFile`` docstring)."""
        with self._lock:
            self._files.pop((topic, queue_id), None)
        self.key_index.forget(topic, queue_id)

    def queues(self) -> list[tuple[str, int]]:
        """Queues the tier holds or is uploading, sorted."""
        self.refresh()
        with self._lock:
            return sorted(set(self.metadata.queues()) | set(self._files))

    def topic_queues(self, topic: str) -> list[int]:
        return [q for t, q in self.queues() if t == topic]


def make_backend(
    kind: str,
    path: str | os.PathLike[str],
    cluster: str,
    broker: str,
    env: Mapping[str, str] | None = None,
) -> SegmentBackend | None:
    """The backend ``CAIRN_TIERED_BACKEND`` names: None for ``none``; ``path`` is the
    ``posix`` root; ``s3`` reads its ``CAIRN_TIERED_S3_*`` settings from ``env``
    (default ``os.environ``; boto3 is imported only then).

    Raises:
        ValueError: an unknown kind, or bad S3 settings.
    """
    from mqcore.tiered.memory import MemoryBackend
    from mqcore.tiered.posix import PosixBackend

    if kind == "none":
        return None
    if kind == "posix":
        return PosixBackend(path, cluster, broker)
    if kind == "memory":
        return MemoryBackend()
    if kind == "s3":
        from mqcore.tiered.s3 import s3_backend_from_env

        return s3_backend_from_env(os.environ if env is None else env, cluster, broker)
    raise ValueError(f"tiered backend must be none, posix or memory, got {kind!r}")
