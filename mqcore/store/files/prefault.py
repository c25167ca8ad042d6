"""Pre-faulting the CommitLog ahead of the writer (RocketMQ ``warmMappedFileEnable``).

The first write into each page of a fresh, sparse segment takes a page fault in the writer
(page-cache allocation, zeroing, block reservation: ~1.5 us a 4 KiB page, ~100 ns a small
record), under the put lock. A :class:`Prefaulter` thread faults the pages in ahead of the
write position instead, with ``madvise(MADV_POPULATE_WRITE)`` (Linux >= 5.14): the kernel
maps each page writable "as if written" without writing a byte, so the unwritten tail of
the segment stays zeros, as the store format requires. The call goes through ``ctypes``,
which releases the GIL for the duration, so on a second core it runs beside the writer.

How it follows the writer: the writer compares the end of each append with
:attr:`Prefaulter.trigger` (one integer comparison) and wakes the thread once it has used
half the window; the thread then populates the last segment from the write position to
``ahead_bytes`` past it, ``chunk_bytes`` per call (each under a ``hold()``, so a segment
closed or destroyed meanwhile is never touched after its unmap). A roll is seen as a new
last segment. Where ``madvise`` or the flag is missing (not Linux, an older kernel, a
filesystem that refuses it) the first call fails and the thread stops: puts fault as before.

Blocks first: a page populated writable over a hole takes a disk block without a
reservation (``space.py``), so each populate is preceded by ``MappedFile.reserve_to`` for
its range, which keeps the CommitLog's reservation running ahead of the writer as well. On
a full disk that reservation fails: the thread logs it once, populates nothing and tries
again at its next wake-up (the writer's own check then refuses the put that would pass the
reserved mark); it is never disabled for lack of space.

Config: ``StoreConfig.commitlog_prefault_bytes`` (0 disables), at most 1/16 of a segment:
populated pages take disk blocks ahead of the data (up to the window per store). Started by
the store after recovery for a writer (standalone or broker role), stopped before the
segments are closed.
"""

from __future__ import annotations

import logging
import mmap
import threading
from collections.abc import Callable

from mqcore.errors import DiskFullError
from mqcore.store.config import StoreConfig
from mqcore.store.files import libc
from mqcore.store.files.libc import MADV_POPULATE_WRITE
from mqcore.store.files.mapped_file import MappedFile
from mqcore.store.files.segments import MappedFileQueue

log = logging.getLogger(__name__)


#: Bytes populated per ``madvise`` call: short enough to notice a stop or a roll quickly.
CHUNK_BYTES = 1 << 20

#: How long the idle thread sleeps between looks when nobody wakes it.
IDLE_WAIT_S = 1.0

Madvise = Callable[[int, int, int], int]

#: CommitLog blocks reserved at a time when no pre-fault window says otherwise.
DEFAULT_RESERVE_BYTES = 4 << 20


def reserve_chunk_bytes(config: StoreConfig) -> int:
    """Disk blocks a CommitLog segment reserves at a time ahead of its write position:
    the pre-fault window (4 MiB by default; 4 MiB when pre-faulting is off), at most 1/16
    of a segment, at least a page. A chunk costs 0.01 ms on ext4 and ~1 ms on tmpfs
    (``space.py``): at 50 MB/s of puts, a dozen reservations a second, made by the pre-fault
    thread while it keeps up."""
    window = config.commitlog_prefault_bytes or DEFAULT_RESERVE_BYTES
    return max(mmap.PAGESIZE, min(window, config.commitlog_file_size // 16))


def start_prefaulter(segments: MappedFileQueue, config: StoreConfig) -> Prefaulter | None:
    """The running pre-fault thread of a CommitLog writer, or None when it is disabled.

    The window is at most 1/16 of a segment: populated pages take disk blocks (the store's
    size on disk counts them), which matters only for the small segments of tests."""
    ahead = min(config.commitlog_prefault_bytes, config.commitlog_file_size // 16)
    if ahead < mmap.PAGESIZE:
        return None
    prefaulter = Prefaulter(segments, ahead)
    prefaulter.start()
    return prefaulter


class Prefaulter:
    """Keeps ``ahead_bytes`` past the write position of the last segment populated.

    Writer side: ``if end > prefaulter.trigger: prefaulter.wake()`` after an append (both
    thread-safe: ``trigger`` is an int read whole). :meth:`step` is the thread's unit of
    work and can be called directly (tests).
    """

    def __init__(
        self,
        segments: MappedFileQueue,
        ahead_bytes: int,
        *,
        chunk_bytes: int = CHUNK_BYTES,
        madvise: Madvise | None = None,
    ) -> None:
        self.segments = segments
        self.ahead_bytes = ahead_bytes
        self.chunk_bytes = max(chunk_bytes, mmap.PAGESIZE)
        self._madvise = madvise
        #: The writer wakes the thread once an append ends past this CommitLog offset.
        self.trigger = -1
        #: Bytes populated so far (statistics and tests).
        self.populated_bytes = 0
        #: False once madvise failed: nothing more is tried.
        self.enabled = True
        #: The last reservation ahead failed for lack of space (logged once per episode).
        self.short_of_space = False
        self._segment: MappedFile | None = None
        self._done = 0  # populated up to here in ``_segment`` (a position in the file)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- writer side ----------------------------------------------------------------------

    def wake(self) -> None:
        """Populate now (thread-safe)."""
        self._wake.set()

    # -- the work ---------------------------------------------------------------------------

    def step(self) -> bool:
        """Populate one chunk ahead of the writer. Returns True if there is more to do."""
        if not self.enabled:
            return False
        segment = self.segments.last()
        if segment is None or segment.readonly:
            return False
        if segment is not self._segment:
            self._segment, self._done = segment, 0
        wrote = segment.wrote_position
        stop = min(wrote + self.ahead_bytes, segment.file_size)
        # The page holding the write position is already mapped by the writer's last copy.
        start = max(self._done, wrote - wrote % mmap.PAGESIZE)
        if start >= stop:
            self._set_trigger(segment, stop)
            return False
        end = min(start + self.chunk_bytes, stop)
        if not self._reserve(segment, end):
            return False
        madvise = self._madvise or libc.madvise()
        if madvise is None or not segment.populate(madvise, MADV_POPULATE_WRITE, start, end):
            if madvise is None or segment.is_available:
                # Not supported here (EINVAL on a kernel before 5.14, ENOSYS, ...): give up.
                log.info("CommitLog pre-fault unavailable here (madvise failed): disabled")
                self.enabled = False
            return False
        self.populated_bytes += end - start
        self._done = end
        self._set_trigger(segment, end)
        return end < stop

    def _reserve(self, segment: MappedFile, end: int) -> bool:
        """Blocks for ``[.., end)`` of ``segment`` before it is populated. False (and the
        step ends) on a full disk or when the segment went away meanwhile."""
        try:
            segment.reserve_to(end)
        except DiskFullError as exc:
            if not self.short_of_space:
                self.short_of_space = True
                log.warning("CommitLog pre-fault paused: %s; retrying while puts wait", exc)
            return False
        except OSError:  # the segment was deleted under us: the next step sees the new last
            return False
        if self.short_of_space:
            self.short_of_space = False
            log.info("CommitLog pre-fault resumed: blocks reserved again")
        return True

    def _set_trigger(self, segment: MappedFile, populated_to: int) -> None:
        # Wake again once the writer has used half of the window populated ahead of it (or
        # at once after a roll: the next segment's first append ends past this file).
        if populated_to >= segment.file_size:
            self.trigger = segment.base_offset + segment.file_size - 1
        else:
            self.trigger = segment.base_offset + populated_to - self.ahead_bytes // 2

    # -- thread -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the daemon thread (once)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="cairn-prefault", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread and wait for it (before the segments are closed)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before the step: a wake-up during it is kept for the wait
            try:
                more = self.step()
            except Exception:  # noqa: BLE001 - an optimisation: log it and stop trying
                log.exception("CommitLog pre-fault failed: disabled")
                self.enabled = False
                return
            if not more:
                self._wake.wait(IDLE_WAIT_S)
