"""A run of IndexFile puts done column-wise: ``IndexFile.put_entries``' fast path.

``put_entries`` runs spec 4.5 one entry at a time: read the slot, pack the entry, pack the
slot, publish, ~15 interpreter steps an entry. For a run of entries in a file that already
has its first entry, the same bytes come from a handful of C-level passes:

1. :func:`read_slots`: every entry's slot (``key_hash % hash_slots``) and the value the slot
   holds now, gathered with numpy. A value above the file's entry count (a stale
   slot left by a crash: ``put_entries`` then compares it with the *running* count) sends
   the run back to the loop. When a slot comes twice in the run, the later entry chains to
   the earlier one, as the loop would have it (the only Python loop here, over the run's
   entries, and only for runs that have such a pair).
2. :func:`write_entries`: all entries packed with one ``pack`` and copied in at once.
3. The caller publishes the new entry count, then :func:`write_slots` points every slot at
   its newest entry. So a reader never sees a slot naming an entry above the count (the
   loop briefly shows one per entry, which readers ignore).

Byte for byte the loop's result (``tests/mqcore/store/test_index_file.py`` compares both).
"""

from __future__ import annotations

import functools
import mmap
import struct
import sys
from array import array
from collections import deque
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

#: Runs shorter than this take the loop (the passes have a fixed cost).
BULK_MIN = 32
_SWAP = sys.byteorder == "little"  # the file is big-endian, memoryview 'I' is native
_SLOT_SIZE = 4  # index_file.SLOT: one big-endian int32 per slot
assert array("I").itemsize == _SLOT_SIZE
_SLOT_DTYPE = np.dtype(">u4")


@functools.lru_cache(maxsize=64)
def _entries_struct(entry_format: str, count: int) -> struct.Struct:
    return struct.Struct(">" + entry_format.lstrip(">") * count)


def read_slots(
    mm: mmap.mmap,
    slot_base: int,
    hash_slots: int,
    index: int,
    key_hashes: Sequence[int],
) -> tuple[list[int], list[int], int] | None:
    """Step 1 for entries ``index, index + 1, ...`` with these key hashes (all >= 0).

    The slot values are gathered with one numpy take over the big-endian slot table: the
    reads are scattered over a table of tens of megabytes, so nearly every one misses the
    CPU caches, and a C loop keeps several misses in flight where an interpreted loop waited
    for each in turn (~600 -> ~125 ns an entry for runs of 4096).

    Returns:
        ``(slots, prevs, empty)``: each entry's slot, its ``prev_index``, and how many found
        their slot empty (``hash_slot_count``'s increment); None to take the loop.
    """
    slot_array = np.array(key_hashes, np.int64) % hash_slots
    table = _slot_table(mm, slot_base, hash_slots)
    try:
        found = table[slot_array]
    finally:
        del table  # a live export of the mapping would make mmap.close() fail
    if int(found.max()) >= index:  # a stale slot (or a negative one, read unsigned)
        return None
    empty = len(found) - int(np.count_nonzero(found))
    slots: list[int] = slot_array.tolist()
    prevs: list[int] = found.tolist()
    if len(set(slots)) != len(slots):
        newest: dict[int, int] = {}
        for k, slot in enumerate(slots):
            earlier = newest.get(slot)
            if earlier is not None:
                if prevs[k] == 0:
                    empty -= 1  # the loop finds this slot taken by the earlier entry
                prevs[k] = index + earlier
            newest[slot] = k
    return slots, prevs, empty


def _slot_table(mm: mmap.mmap, slot_base: int, hash_slots: int) -> npt.NDArray[np.uint32]:
    """The slot table as big-endian uint32s over the mapping (an export: drop it soon)."""
    return np.frombuffer(mm, _SLOT_DTYPE, hash_slots, slot_base)


def time_diffs(store_timestamps: Sequence[int], begin_timestamp: int, max_diff: int) -> list[int]:
    """Each entry's ``time_diff`` (spec 4.5 step 3), per distinct store time."""
    count = len(store_timestamps)
    if count > 1 and not count % 2:
        # Reput's usual run: two keys a message (UNIQ_KEY and one business key) with the
        # message's store time: the diffs of every other entry, each taken twice.
        first = store_timestamps[0::2]
        if first == store_timestamps[1::2]:
            half = time_diffs(first, begin_timestamp, max_diff)
            diffs = [0] * count
            diffs[0::2] = diffs[1::2] = half
            return diffs
    by_time = {}
    for timestamp in set(store_timestamps):
        diff = 0 if begin_timestamp <= 0 else (timestamp - begin_timestamp) // 1000
        by_time[timestamp] = min(max(diff, 0), max_diff)
    return list(map(by_time.__getitem__, store_timestamps))


def write_entries(
    mm: mmap.mmap,
    position: int,
    entry_format: str,
    key_hashes: Sequence[int],
    phys_offsets: Sequence[int],
    diffs: Sequence[int],
    prevs: Sequence[int],
) -> None:
    """Step 2: the entries, back to back from ``position``."""
    count = len(key_hashes)
    flat: list[int] = [0] * (4 * count)
    flat[0::4] = key_hashes
    flat[1::4] = phys_offsets
    flat[2::4] = diffs
    flat[3::4] = prevs
    data = _entries_struct(entry_format, count).pack(*flat)
    mm[position : position + len(data)] = data


def write_slots(
    mm: mmap.mmap, slot_base: int, hash_slots: int, slots: Sequence[int], index: int
) -> None:
    """Step 3: slot ``slots[k]`` := ``index + k``, in order (the newest entry wins)."""
    if len(set(slots)) != len(slots):
        # numpy does not promise which of repeated indexes an assignment keeps: in order.
        values = array("I", range(index, index + len(slots)))
        if _SWAP:
            values.byteswap()
        with (
            memoryview(mm) as whole,
            whole[slot_base : slot_base + hash_slots * _SLOT_SIZE] as table,
            table.cast("I") as view,
        ):
            deque(map(view.__setitem__, slots, values), maxlen=0)
        return
    slot_table = _slot_table(mm, slot_base, hash_slots)
    try:
        slot_table[np.array(slots, np.int64)] = np.arange(
            index, index + len(slots), dtype=np.uint32
        )
    finally:
        del slot_table
