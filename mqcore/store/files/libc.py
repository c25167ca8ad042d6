"""``madvise``, ``msync`` and ``mallopt`` from the C library, called through ``ctypes``.

Python's ``mmap.madvise`` lacks Linux 5.14's ``MADV_POPULATE_WRITE`` (``prefault.py``), and
``mmap.flush`` holds the GIL for the whole ``msync``: a flush of the CommitLog's dirty
range (tens of megabytes at 500 ms intervals under load, each syncing for tens of
milliseconds to disk) stopped every Python thread of the broker meanwhile, puts, reput
and the Kafka listener's loop alike. A ``ctypes.CDLL`` function releases the GIL while
it runs, so the same ``msync`` here lets the other threads go on.

Each function is None off Linux or where the C library lacks it; callers then fall back
to ``mmap``'s own method.

Thread-safety: the functions are loaded once, under a lock.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

#: ``MADV_POPULATE_WRITE`` from <linux/mman.h> (Linux 5.14); Python 3.12's mmap lacks it.
MADV_POPULATE_WRITE = 23
#: ``MS_SYNC`` from <sys/mman.h> on Linux: write back, and wait for it.
MS_SYNC = 4

#: ``madvise(addr, length, advice)`` and ``msync(addr, length, flags)``: 0 or -1 (errno).
AddressCall = Callable[[int, int, int], int]

_functions: dict[str, Any] = {}
_load_lock = threading.Lock()


_ADDRESS_CALL: list[Any] = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def _load(name: str, argtypes: list[Any]) -> Any:
    with _load_lock:
        if name not in _functions:
            found = None
            if sys.platform.startswith("linux"):
                try:
                    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
                    fn = getattr(libc, name)
                    fn.argtypes = argtypes
                    fn.restype = ctypes.c_int
                    found = fn
                except (OSError, AttributeError):
                    found = None
            _functions[name] = found
        return _functions[name]


def madvise() -> AddressCall | None:
    """The C library's ``madvise``, or None."""
    found: AddressCall | None = _load("madvise", _ADDRESS_CALL)
    return found


def msync() -> AddressCall | None:
    """The C library's ``msync``, or None."""
    found: AddressCall | None = _load("msync", _ADDRESS_CALL)
    return found


def mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt(param, value)`` (1 when it took), or None."""
    found: Callable[[int, int], int] | None = _load("mallopt", [ctypes.c_int, ctypes.c_int])
    return found


def map_address(mm: mmap.mmap) -> int:
    """The address of a writable mapping. The ctypes view that reveals it is dropped at
    once: a live export would make ``mmap.close`` fail."""
    probe = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(probe)
    finally:
        del probe


def msync_range(mm: mmap.mmap, address: int | None, start: int, length: int) -> int | None:
    """``mm.flush(start, length)`` without holding the GIL where it can: through
    :func:`msync` at ``address`` (the mapping's, :func:`map_address`; None: work it out).
    Returns the address used (for the caller to keep), None after the fallback.

    Raises:
        OSError: msync failed.
    """
    sync = msync()
    if sync is None:
        mm.flush(start, length)
        return None
    if address is None:
        address = map_address(mm)
    if sync(address + start, length, MS_SYNC) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"msync: {os.strerror(errno)}")
    return address
