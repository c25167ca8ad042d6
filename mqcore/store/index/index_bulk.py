"""A run of IndexFile puts done column-wise: ``IndexFile.put_entries``' fast path.

``put_entries`` runs spec 4.5 one entry at a time: read the slot, pack the entry, pack the
slot, publish, ~15 interpreter steps an entry. For a run of entries in a file that already
has its first entry, the same bytes come from a handful of numpy passes over the run's
columns (int64 arrays: :func:`as_array` takes lists or arrays), with no Python object per
entry:

1. :func:`read_slots`: every entry's slot (``key_hash % hash_slots``) and the value the slot
   holds now, gathered with numpy. A value above the file's entry count (a stale
   slot left by a crash: ``put_entries`` then compares it with the *running* count) sends
   the run back to the loop. When a slot comes twice in the run, the later entry chains to
   the earlier one, as the loop would have it: found with one sort of the slots, and only
   the entries of such slots (a few a run: 4096 keys in 5,000,000 slots share ~2 slots)
   are walked in Python.
2. :func:`write_entries`: all entries laid out as one big-endian numpy record array and
   copied in at once.
3. The caller publishes the new entry count, then :func:`write_slots` points every slot at
   its newest entry. So a reader never sees a slot naming an entry above the count (the
   loop briefly shows one per entry, which readers ignore).

Byte for byte the loop's result (``tests/mqcore/store/index/test_index_file.py`` compares both).
Runs of 4096 keys (CI box, ns a key): the slot gather ~25 on a table already touched (170-250
on a fresh sparse file, where the first touch of each slot page faults), time diffs ~6,
entries ~25, slot writes ~20. The list passes this replaced (lists to arrays and back, a
``pack(*flat)`` of 4 ints a key, a ``set`` of the slots and a Python loop over the run
whenever two keys shared a slot) cost ~0.3 us a key beyond the gather.
"""

from __future__ import annotations

import functools
import mmap
import re
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

#: Runs shorter than this take the loop (the passes have a fixed cost).
BULK_MIN = 32
_SLOT_DTYPE = np.dtype(">u4")  # index_file.SLOT: one big-endian int32 per slot

type Ints = npt.NDArray[np.int64]


def as_array(values: Sequence[int] | Ints) -> Ints:
    """``values`` as an int64 array (an array already is one: no copy)."""
    return np.asarray(values, np.int64)


def as_ints(values: Sequence[int] | Ints) -> Sequence[int]:
    """``values`` as Python ints, for the loop (numpy scalars would leak into the header)."""
    if isinstance(values, np.ndarray):
        ints: list[int] = values.tolist()
        return ints
    return values


@functools.lru_cache(maxsize=4)
def _entry_dtype(entry_format: str) -> np.dtype[np.void]:
    """``index_file.ENTRY`` (``>iqii``) as a packed big-endian numpy record."""
    codes = re.fullmatch(r">?(iqii)", entry_format)
    assert codes is not None, entry_format
    return np.dtype(
        {
            "names": ["key_hash", "phys_offset", "time_diff", "prev_index"],
            "formats": [">i4", ">i8", ">i4", ">i4"],
            "offsets": [0, 4, 12, 16],
            "itemsize": 20,
        }
    )


class Slots(NamedTuple):
    """What :func:`read_slots` found for a run."""

    slots: Ints
    """Each entry's slot."""
    prevs: Ints
    """Each entry's ``prev_index``."""
    empty: int
    """How many entries found their slot empty (``hash_slot_count``'s increment)."""
    newest: npt.NDArray[np.bool_] | None
    """The entries no later entry of the run shares a slot with (None: all of them)."""


def read_slots(
    mm: mmap.mmap, slot_base: int, hash_slots: int, index: int, key_hashes: Ints
) -> Slots | None:
    """Step 1 for entries ``index, index + 1, ...`` with these key hashes (all >= 0).

    The slot values are gathered with one numpy take over the big-endian slot table: the
    reads are scattered over a table of tens of megabytes, so nearly every one misses the
    CPU caches, and a C loop keeps several misses in flight where an interpreted loop waited
    for each in turn (~600 -> ~125 ns an entry for runs of 4096).

    Returns:
        The slots, prevs, empty count and newest entries; None to take the loop.
    """
    slots = key_hashes % hash_slots
    table = _slot_table(mm, slot_base, hash_slots)
    try:
        found = table[slots]
    finally:
        del table  # a live export of the mapping would make mmap.close() fail
    if int(found.max()) >= index:  # a stale slot (or a negative one, read unsigned)
        return None
    prevs = found.astype(np.int64)
    empty = len(found) - int(np.count_nonzero(found))
    # Repeated slots: the sorted slots (uint32 sort: ~10 ns a key) show them side by side.
    ordered = np.sort(slots.astype(np.uint32))
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if not len(repeated):
        return Slots(slots, prevs, empty, None)
    members = np.zeros(len(slots), np.bool_)
    for slot in np.unique(repeated).tolist():  # a few a run
        members |= slots == slot
    newest = np.ones(len(slots), np.bool_)
    latest: dict[int, int] = {}
    for k, slot in zip(np.flatnonzero(members).tolist(), slots[members].tolist(), strict=True):
        earlier = latest.get(slot)
        if earlier is not None:
            if prevs[k] == 0:
                empty -= 1  # the loop finds this slot taken by the earlier entry
            prevs[k] = index + earlier
            newest[earlier] = False
        latest[slot] = k
    return Slots(slots, prevs, empty, newest)


def _slot_table(mm: mmap.mmap, slot_base: int, hash_slots: int) -> npt.NDArray[np.uint32]:
    """The slot table as big-endian uint32s over the mapping (an export: drop it soon)."""
    return np.frombuffer(mm, _SLOT_DTYPE, hash_slots, slot_base)


def time_diffs(store_timestamps: Ints, begin_timestamp: int, max_diff: int) -> Ints:
    """Each entry's ``time_diff`` (spec 4.5 step 3). Java divides toward zero and numpy
    floors; they differ only for negative diffs, which are clamped to 0 either way."""
    if begin_timestamp <= 0:
        return np.zeros(len(store_timestamps), np.int64)
    diffs = (store_timestamps - begin_timestamp) // 1000
    return np.clip(diffs, 0, max_diff, out=diffs)


def write_entries(
    mm: mmap.mmap,
    position: int,
    entry_format: str,
    key_hashes: Ints,
    phys_offsets: Ints,
    diffs: Ints,
    prevs: Ints,
) -> None:
    """Step 2: the entries, back to back from ``position``."""
    entries = np.empty(len(key_hashes), _entry_dtype(entry_format))
    entries["key_hash"] = key_hashes
    entries["phys_offset"] = phys_offsets
    entries["time_diff"] = diffs
    entries["prev_index"] = prevs
    mm[position : position + entries.nbytes] = memoryview(entries).cast("B")


def write_slots(
    mm: mmap.mmap,
    slot_base: int,
    hash_slots: int,
    found: Slots,
    index: int,
) -> None:
    """Step 3: slot ``slots[k]`` := ``index + k`` for each entry no later entry shares its
    slot with (numpy does not promise which of repeated indexes an assignment keeps)."""
    slots = found.slots
    values = np.arange(index, index + len(slots), dtype=np.uint32)
    if found.newest is not None:
        slots = slots[found.newest]
        values = values[found.newest]
    slot_table = _slot_table(mm, slot_base, hash_slots)
    try:
        slot_table[slots] = values
    finally:
        del slot_table
