"""The broker process's C allocator settings: keep large buffers in the heap.

The broker's hot paths allocate and free buffers of a few megabytes many times a second: a
Kafka produce joins a 1 MB batch's records into one ~2 MB ``bytes`` for the CommitLog, a
Fetch copies a run of CommitLog records and builds numpy arrays of the same order. glibc
serves an allocation above its mmap threshold (128 KiB at first, then raised to the size
of each mapped block freed) with a fresh ``mmap`` and gives it back on free, and gives the
heap top back once more than twice that threshold is free there, which a burst of such
buffers freed together leaves (``tests/cairn/test_malloc_policy.py``: three 4 MiB buffers
fault ~2,000 pages in again per burst). Every page given back costs a page fault and its
zeroing when written again. With the thresholds fixed at 32 MiB (glibc's largest mmap
threshold on 64-bit) and 256 MiB, those buffers come from memory the process already has.

Why it matters (``bench/kafka.py --only cairn`` shows it): with glibc's moving thresholds a
produced or fetched 100-byte record costs the broker about 1.5 times the CPU, all of it page
faults and zeroing. The cost is memory: freed buffers up to the trim threshold per malloc
arena stay with the process.

Applied by ``server.asgi`` (``runbroker``) and ``bench/kafka.py``'s broker process, like
``cairn.gc_policy``. Anywhere without glibc's ``mallopt`` it does nothing.
"""

from __future__ import annotations

import logging

from mqcore.store.files import libc

log = logging.getLogger(__name__)

#: ``mallopt`` parameters from glibc's <malloc.h>.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
TRIM_THRESHOLD_BYTES = 256 << 20


def keep_large_buffers() -> bool:
    """Fix glibc's mmap and trim thresholds (see the module docstring). Returns whether
    both settings took."""
    mallopt = libc.mallopt()
    if mallopt is None:
        return False
    took = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
    if not took:
        log.info("mallopt refused the broker's thresholds; the allocator keeps its own")
    return took
