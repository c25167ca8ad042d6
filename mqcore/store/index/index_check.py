"""``IndexFile.check``: the structural walk of one index file (invariants in ``index_file``)."""

from __future__ import annotations

import mmap
from array import array
from typing import Final

from mqcore.store.index.index_file import ENTRY, HEADER, INVALID_INDEX, SLOT

_FIRST_INDEX: Final = 1
_MAX_REPORTED_DEFECTS: Final = 100
_CHECK_CHUNK_ENTRIES: Final = 1 << 16


class IndexChecker:
    """The structural walk behind :meth:`IndexFile.check` over a held mapping."""

    def __init__(
        self, name: str, mm: mmap.mmap, hash_slots: int, max_entries: int, entry_base: int
    ) -> None:
        self.name = name
        self.mm = mm
        self.hash_slots = hash_slots
        self.max_entries = max_entries
        self.entry_base = entry_base
        self.defects: list[str] = []
        self.dropped = 0

    def report(self, text: str) -> None:
        if len(self.defects) < _MAX_REPORTED_DEFECTS:
            self.defects.append(f"{self.name}: {text}")
        else:
            self.dropped += 1

    def run(self) -> list[str]:
        begin_ts, end_ts, begin_phys, end_phys, slot_count, raw_count = HEADER.unpack_from(
            self.mm, 0
        )
        count = raw_count if raw_count > 0 else _FIRST_INDEX
        max_entries = self.max_entries
        if count > max_entries:
            self.report(f"header index_count {raw_count} > max_entries {max_entries}")
            count = max_entries
        if count > _FIRST_INDEX:
            if end_ts < begin_ts:
                self.report(f"header end_timestamp {end_ts} < begin_timestamp {begin_ts}")
            if end_phys < begin_phys:
                self.report(f"header end_phys_offset {end_phys} < begin_phys_offset {begin_phys}")
        entry_slots = self.check_entries(count)
        occupied = self.check_slots(count, entry_slots)
        if slot_count != occupied:
            self.report(f"header hash_slot_count {slot_count} != {occupied} occupied slots")
        if self.dropped:
            self.defects.append(f"{self.name}: ... and {self.dropped} more defects")
        return self.defects

    def check_entries(self, count: int) -> array[int]:
        """Check entries 1..count-1; return each entry's slot (index 0 unused)."""
        hash_slots = self.hash_slots
        base = self.entry_base
        entry_slots = array("i", [0]) * count
        index = _FIRST_INDEX
        while index < count:
            stop = min(count, index + _CHECK_CHUNK_ENTRIES)
            chunk = self.mm[base + index * ENTRY.size : base + stop * ENTRY.size]
            for key_hash, _phys, time_diff, prev in ENTRY.iter_unpack(chunk):
                slot = key_hash % hash_slots
                entry_slots[index] = slot
                if key_hash < 0:
                    self.report(f"entry {index}: negative key_hash {key_hash}")
                if time_diff < 0:
                    self.report(f"entry {index}: negative time_diff {time_diff}")
                if prev != INVALID_INDEX:
                    if not _FIRST_INDEX <= prev < index:
                        self.report(f"entry {index}: prev_index {prev} not in 1..{index - 1}")
                    elif entry_slots[prev] != slot:
                        self.report(
                            f"entry {index}: prev_index {prev} is in slot "
                            f"{entry_slots[prev]}, not {slot}"
                        )
                index += 1
        return entry_slots

    def check_slots(self, count: int, entry_slots: array[int]) -> int:
        """Check every slot head; return how many slots are occupied."""
        base = HEADER.size
        slots = array("i")
        slots.frombytes(self.mm[base : base + self.hash_slots * SLOT.size])
        if array("i", [1]).tobytes()[0] == 1:  # little-endian host: the file is big-endian
            slots.byteswap()
        occupied = 0
        for slot_pos, head in enumerate(slots):
            if head == INVALID_INDEX:
                continue
            occupied += 1
            if not _FIRST_INDEX <= head < count:
                self.report(f"slot {slot_pos}: value {head} not in 1..{count - 1}")
            elif entry_slots[head] != slot_pos:
                self.report(f"slot {slot_pos}: head entry {head} hashes to {entry_slots[head]}")
        return occupied
