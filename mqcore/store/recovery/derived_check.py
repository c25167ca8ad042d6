"""The start check of the derived files: does each ConsumeQueue, and the index, match the CommitLog?

Run by every writer's open after recovery (``derived_start.py``); read-only. A queue or the
index that fails is *damaged* and gets rebuilt from the CommitLog in the background. The cost
is bounded whatever the store's size, by budgets each check (the queues, the index) has for
the whole store:

* ``STRUCTURE_BUDGET_BYTES`` of files read whole and checked with numpy (no record read),
  newest files first.
* ``RECORD_BUDGET`` record reads, and ``TIME_BUDGET_S`` for them once
  ``GUARANTEED_RECORDS`` are read. A store with fewer units (or entries) than that has every
  one checked against its record whatever the load (a test store: about 0.05 s); a bigger
  one has the reads shared between the queues (the index files), spread over every file,
  until the time is up. Every queue's last unit and every index file's
  newest entry are checked whatever is left: the start costs at most the budgets plus a
  few reads per queue and per file (1,000,000 messages in 8 queues, default file sizes:
  ~0.7 s of check on the loaded CI box, where the same open spends 7-14 s in recovery).

ConsumeQueue, per file then per sampled unit (the first finding names the damage):

    structure  every unit valid (phys >= 0, size > 0) or blank; real units ascend strictly
               and never overlap (phys + size <= next phys), across files too
    records    the unit points at a valid record of the queue's topic and queue id, stored
               at the unit's queue offset, with the unit's size and tag code

IndexFile, per file then per sampled entry:

    header     index_count and hash_slot_count within the dimensions; begin <= end (time,
               phys offset); files in CommitLog order
    structure  prev_index below the entry and in its slot; each occupied slot's head a
               written entry of that slot, its newest; every entry on exactly one chain
               (in-degree); hash_slot_count = occupied slots
    records    the entry points at a valid record one of whose keys hashes to its key hash,
               with the time_diff its store time gives, and its slot's chain reaches it

Units and entries pointing below the CommitLog's first segment are expired, not damage.

Quarantined CommitLog ranges (``quarantine.py``: corrupt bytes kept in place, skipped by
every reader) are the log's damage, not the derived files': a unit or an entry that points
into one points at a record now known bad, which is what it did when it was written, and a
rebuild could not do better (it cannot dispatch that record again, and puts a blank unit at
its queue offset, which readers skip too). Such units and entries still count in the
structure checks but are not read. A sampled unit that points at no valid record where the
quarantine has nothing yet (recovery scans only the newest segments) is handed to
``CommitLog.quarantine_unreadable``, found by ``check``: when the log is damaged there (no
valid record at the unit, none inside its size, a valid one right after) the bytes are
quarantined and the unit is right; anything else (a unit off by a byte, a wrong size) is
damage of the queue. An index entry has no size: its record's header, if it still reads,
names the queue unit that frames the record for the same test.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from mqcore.errors import StoreClosedError
from mqcore.format.layout import HEADER_SIZES
from mqcore.store.commit_log import CommitLog
from mqcore.store.consume_queue import _UNIT_DTYPE, BLANK_SIZE, CQ_UNIT_SIZE, ConsumeQueue
from mqcore.store.consume_queue_store import ConsumeQueueStore
from mqcore.store.index.index_file import ENTRY_DTYPE, INVALID_INDEX, SLOT, IndexFile
from mqcore.store.index.index_service import IndexService
from mqcore.store.recovery.quarantine import record_header
from mqcore.store.recovery.verify_derived import RecordReader, entry_problems, unit_problem

log = logging.getLogger(__name__)

#: Bytes of ConsumeQueue (of IndexFile) read whole for the numpy checks, over the store: a
#: 16 MiB file of units or entries takes ~0.1-0.4 s on the shared CI box.
STRUCTURE_BUDGET_BYTES = 16 * 1024 * 1024
#: Records read to check units (entries), over the store.
RECORD_BUDGET = 65_536
#: Time the sampled reads of the ConsumeQueues (of the index) may take, whatever is left of
#: the record budget: a unit check costs 3-25 us, an entry check 10-100 us, depending on the
#: machine's load and what is in the page cache.
TIME_BUDGET_S = 0.3
#: Record reads made whatever the time (the first ones of each check): a small store is
#: checked whole even on a machine too loaded to read 4,096 records in ``TIME_BUDGET_S``
#: (at most ~0.4 s more there; the start check's findings must not depend on the load).
GUARANTEED_RECORDS = 4_096
#: A sampled entry whose slot chain is longer than this before reaching it is not judged.
CHAIN_STEPS = 256

type _Ints = npt.NDArray[np.int64]


@dataclass
class Budget:
    """What is left of the budgets (module docstring) of one check (queues or index)."""

    structure_bytes: int = STRUCTURE_BUDGET_BYTES
    records: int = RECORD_BUDGET
    deadline: float = field(default_factory=lambda: time.monotonic() + TIME_BUDGET_S)
    read: int = 0

    def spent(self) -> bool:
        """No more sampled reads: the record budget is used up, or the time is and the
        guaranteed reads are made."""
        if self.records <= 0:
            return True
        return self.read >= GUARANTEED_RECORDS and time.monotonic() >= self.deadline

    def take_record(self) -> None:
        self.records -= 1
        self.read += 1

    def take_structure(self, size: int) -> bool:
        """Whether a file of ``size`` bytes gets its numpy structure check. Bounded by bytes
        only, not by time: it is cheap (16 MiB in ~0.1-0.4 s) and what it finds (a unit or
        an entry out of its chain) must be found however loaded the machine is."""
        if size > self.structure_bytes:
            return False
        self.structure_bytes -= size
        return True


def spread(count: int, wanted: int) -> list[int]:
    """Up to ``wanted`` positions of ``range(count)``, spread evenly, both ends included."""
    if count <= 0 or wanted <= 0:
        return []
    if wanted >= count:
        return list(range(count))
    if wanted == 1:
        return [count - 1]
    step = (count - 1) / (wanted - 1)
    return sorted({round(i * step) for i in range(wanted)})


def shares(sizes: Sequence[int], budget: int) -> list[int]:
    """``budget`` split in proportion to ``sizes``: each at least 2 (its ends), at most its
    size; everything when the sizes fit."""
    total = sum(sizes)
    if total <= budget:
        return list(sizes)
    return [min(size, max(2, budget * size // max(total, 1))) for size in sizes]


# --- ConsumeQueue -------------------------------------------------------------------------


def _units_of(queue: ConsumeQueue, index: int) -> npt.NDArray[np.void] | None:
    """The written units of the queue's file ``index`` as a structured array."""
    mapped = queue.segments.files[index]
    if not mapped.hold():
        return None
    try:
        end = mapped.wrote_position - mapped.wrote_position % CQ_UNIT_SIZE
        data = mapped.read(0, end)
    except StoreClosedError:
        return None
    finally:
        mapped.release()
    return np.frombuffer(data, dtype=_UNIT_DTYPE)


def structure_problem(units: npt.NDArray[np.void], first_offset: int, last_phys: int) -> str:
    """What breaks the unit rules in ``units`` (queue offsets from ``first_offset``), the
    previous real unit pointing at ``last_phys`` ("" when nothing)."""
    phys = units["phys_offset"].astype(np.int64)
    size = units["size"].astype(np.int64)
    blank = (phys == 0) & (size == BLANK_SIZE)
    bad = ~blank & ((phys < 0) | (size <= 0))
    if bad.any():
        at = int(np.argmax(bad))
        return (
            f"invalid unit at queue offset {first_offset + at} ({int(phys[at])}, {int(size[at])})"
        )
    real = np.flatnonzero(~blank)
    if not len(real):
        return ""
    p, s = phys[real], size[real]
    if last_phys >= 0 and p[0] <= last_phys:
        return f"unit at queue offset {first_offset + int(real[0])} does not follow the previous"
    overlap = p[1:] < p[:-1] + s[:-1]
    if overlap.any():
        at = int(real[int(np.argmax(overlap)) + 1])
        return (
            f"unit at queue offset {first_offset + at} (phys {int(phys[at])}) overlaps or "
            "comes before the previous unit's record"
        )
    return ""


def check_queue(
    queue: ConsumeQueue, reader: RecordReader, budget: Budget, record_share: int
) -> str:
    """The first damage found in ``queue`` ("" when none); spends from ``budget``."""
    files = queue.segments.files
    if not files:
        return ""
    counts = [m.wrote_position // CQ_UNIT_SIZE for m in files]
    file_shares = shares(counts, max(record_share, 2 * len(files)))
    for index in range(len(files) - 1, -1, -1):  # newest first: the structure budget
        whole = budget.take_structure(counts[index] * CQ_UNIT_SIZE)
        units = _units_of(queue, index) if whole else None
        if units is not None:
            problem = structure_problem(units, files[index].base_offset // CQ_UNIT_SIZE, -1)
            if problem:
                return problem
        problem = _check_records(queue, reader, budget, index, units, file_shares[index])
        if problem:
            return problem
    return _check_file_seams(queue)


def _check_file_seams(queue: ConsumeQueue) -> str:
    """Each file's first real unit comes after the previous file's last (from the ends)."""
    files = queue.segments.files
    per_file = queue.file_size // CQ_UNIT_SIZE
    previous = -1
    for mapped in files:
        first = mapped.base_offset // CQ_UNIT_SIZE
        count = mapped.wrote_position // CQ_UNIT_SIZE
        ends = [u for u in (queue.unit_at(first), queue.unit_at(first + count - 1)) if u]
        reals = [u for u in ends if not (u.phys_offset == 0 and u.size == BLANK_SIZE)]
        if reals and reals[0].phys_offset <= previous:
            return f"file {mapped.path.name} starts before the previous file's last unit"
        if reals:
            previous = reals[-1].phys_offset
        if count < per_file and mapped is not files[-1]:
            return f"file {mapped.path.name} is not full but is not the last"
    return ""


def _check_records(
    queue: ConsumeQueue,
    reader: RecordReader,
    budget: Budget,
    index: int,
    units: npt.NDArray[np.void] | None,
    share: int,
) -> str:
    files = queue.segments.files
    mapped = files[index]
    first_offset = mapped.base_offset // CQ_UNIT_SIZE
    count = mapped.wrote_position // CQ_UNIT_SIZE
    last = count - 1 if mapped is files[-1] else -1  # the queue's last unit: always checked
    positions = spread(count, min(share, max(budget.records, 1)))
    for pos in positions:
        if pos != last and budget.spent():
            continue
        offset = first_offset + pos
        if units is not None:
            phys, size, tags = (int(units[pos][f]) for f in ("phys_offset", "size", "tags_code"))
        else:
            unit = queue.unit_at(offset)
            if unit is None:
                continue
            phys, size, tags = unit.phys_offset, unit.size, unit.tags_code
        if phys == 0 and size == BLANK_SIZE:
            continue
        if quarantined(reader, phys, size):
            continue
        budget.take_record()
        record = reader.at(phys)
        if record is None:
            continue  # expired
        if isinstance(record, str) and _log_damaged_at(reader, phys, size, record):
            continue
        problem = unit_problem(record, queue.topic, queue.queue_id, offset, size, tags)
        if problem:
            return f"unit at queue offset {offset} (phys {phys}): {problem}"
    return ""


def quarantined(reader: RecordReader, phys: int, size: int = 1) -> bool:
    """Whether ``[phys, phys + size)`` lies in a quarantined CommitLog range (module
    docstring: the pointer is right, the record is known bad and skipped by readers)."""
    quarantine = reader.commit_log.quarantine
    return bool(quarantine.ranges) and quarantine.covering(phys, size) is not None


def _log_damaged_at(reader: RecordReader, phys: int, size: int, why: str) -> bool:
    """A unit points at no valid record: whether that is the CommitLog's damage, now
    quarantined (module docstring), rather than the unit's."""
    if phys >= reader.end_offset:
        return False
    return reader.commit_log.quarantine_unreadable(phys, size, why, found_by="check")


def check_queues(
    queues: Sequence[ConsumeQueue], commit_log: CommitLog, end_offset: int
) -> dict[tuple[str, int], str]:
    """Check every queue (module docstring). Returns the damaged ones and why."""
    reader = RecordReader(commit_log, end_offset, set())
    budget = Budget()
    sizes = [max(q.max_offset - q.min_offset, 0) for q in queues]
    damaged: dict[tuple[str, int], str] = {}
    for queue, share in zip(queues, shares(sizes, RECORD_BUDGET), strict=True):
        problem = check_queue(queue, reader, budget, share)
        if problem:
            damaged[(queue.topic, queue.queue_id)] = problem
    return damaged


# --- IndexFile ------------------------------------------------------------------------------


def header_problem(f: IndexFile, previous: IndexFile | None) -> str:
    begin_ts, end_ts, begin_phys, end_phys, slot_count, count = f.read_header()
    count = max(count, 1)
    if count > f.max_entries:
        return f"index_count {count} > max_entries {f.max_entries}"
    if not 0 <= slot_count <= min(f.hash_slots, count - 1):
        return f"hash_slot_count {slot_count} out of range for {count - 1} entries"
    if count > 1 and (end_ts < begin_ts or end_phys < begin_phys):
        return f"end before begin (time {begin_ts}..{end_ts}, phys {begin_phys}..{end_phys})"
    if previous is not None and count > 1 and begin_phys < previous.end_phys_offset:
        return f"begins at phys {begin_phys}, before {previous.name} ends"
    return ""


def index_structure_problem(f: IndexFile) -> str:
    """The chain rules over the whole file (module docstring), with numpy."""
    count = f.index_count
    entries = np.frombuffer(f.read_entries(0, count), dtype=ENTRY_DTYPE)
    key_hash = entries["key_hash"].astype(np.int64)
    prev = entries["prev_index"].astype(np.int64)
    entry_slot = key_hash % f.hash_slots
    idx = np.arange(count)
    if count > 1 and (key_hash[1:] < 0).any():
        return f"entry {int(np.argmax(key_hash[1:] < 0)) + 1}: negative key hash"
    linked = (idx >= 1) & (prev != INVALID_INDEX)
    bad = linked & ((prev < 1) | (prev >= idx))
    if bad.any():
        return f"entry {int(np.argmax(bad))}: prev_index not below it"
    targets = np.where(linked, prev, 0)
    if (linked & (entry_slot[targets] != entry_slot)).any():
        return f"entry {int(np.argmax(linked & (entry_slot[targets] != entry_slot)))}: prev in another slot"
    heads = np.frombuffer(f.read_slots(), dtype=np.dtype(">i4")).astype(np.int64)
    occupied = np.flatnonzero(heads != INVALID_INDEX)
    head_values = heads[occupied]
    if ((head_values < 1) | (head_values >= count)).any():
        return "a slot points past the written entries"
    if (entry_slot[head_values] != occupied).any():
        return "a slot's head entry belongs to another slot"
    newest = np.full(f.hash_slots, INVALID_INDEX, np.int64)
    np.maximum.at(newest, entry_slot[1:], idx[1:])
    stale = newest[occupied] != head_values
    if stale.any() or (newest != INVALID_INDEX).sum() != len(occupied):
        if not stale.any():
            return "an entry's slot is empty"
        at = int(np.argmax(stale))
        return (
            f"slot {int(occupied[at])}'s head is entry {int(head_values[at])}, not its "
            f"newest entry {int(newest[occupied[at]])}"
        )
    in_degree = np.bincount(prev[linked], minlength=count)
    expected = np.ones(count, np.int64)
    expected[0] = 0
    expected[head_values] = 0
    if (in_degree != expected).any():
        return f"entry {int(np.argmax(in_degree != expected))} is not on exactly one chain"
    if len(occupied) != f.hash_slot_count:
        return f"hash_slot_count {f.hash_slot_count} != {len(occupied)} occupied slots"
    return ""


def _chain_reaches(f: IndexFile, index: int, key_hash: int) -> bool | None:
    """Whether the chain of ``key_hash``'s slot reaches entry ``index`` (None: too long)."""
    at = f.slot(key_hash % f.hash_slots)
    for _ in range(CHAIN_STEPS):
        if at == index:
            return True
        if at < index or at >= f.index_count:
            return False
        at = f.entry(at).prev_index
    return None


def _unit_frames(queues: ConsumeQueueStore, reader: RecordReader, phys: int, why: str) -> bool:
    """An index entry points at no valid record: whether the ConsumeQueue unit of the
    record whose header still reads there (queue id, queue offset) points at it too, and
    the CommitLog is damaged there (``CommitLog.quarantine_unreadable`` with the unit's
    size, found by ``check``): two derived files agree, the log is what went bad."""
    head = reader.commit_log.read(phys, HEADER_SIZES[0]) if phys < reader.end_offset else None
    header = record_header(head, phys) if head is not None else None
    if header is None:
        return False
    for topic in queues.topics():
        queue = queues.get(topic, header.queue_id)
        unit = queue.unit_at(header.queue_offset) if queue is not None else None
        if unit is not None and unit.phys_offset == phys:
            log_damaged = reader.commit_log.quarantine_unreadable
            return log_damaged(phys, unit.size, why, found_by="check")
    return False


def check_index_file(
    f: IndexFile,
    previous: IndexFile | None,
    reader: RecordReader,
    budget: Budget,
    share: int,
    queues: ConsumeQueueStore | None = None,
) -> str:
    """The first damage found in one index file ("" when none)."""
    problem = header_problem(f, previous)
    if problem:
        return problem
    size = f.hash_slots * SLOT.size + f.index_count * ENTRY_DTYPE.itemsize
    if f.index_count > 1 and budget.take_structure(size):
        problem = index_structure_problem(f)
        if problem:
            return problem
    newest = f.index_count - 1  # always checked
    for index in (1 + p for p in spread(newest, min(share, max(budget.records, 1)))):
        if index != newest and budget.spent():
            continue
        entry = f.entry(index)
        if quarantined(reader, entry.phys_offset):
            continue
        budget.take_record()
        record = reader.at(entry.phys_offset)
        if record is None:
            continue  # expired
        if isinstance(record, str) and queues is not None:
            if _unit_frames(queues, reader, entry.phys_offset, record):
                continue
        problems = entry_problems(record, index, entry.key_hash, entry.time_diff, f.begin_timestamp)
        if not problems and _chain_reaches(f, index, entry.key_hash) is False:
            problems = [f"not reachable from its slot {entry.key_hash % f.hash_slots}"]
        if problems:
            return f"entry {index} (phys {entry.phys_offset}): {problems[0]}"
    return ""


def check_index(
    index: IndexService,
    commit_log: CommitLog,
    end_offset: int,
    queues: ConsumeQueueStore | None = None,
) -> str:
    """Check every index file (module docstring). Returns the first damage, "" if none.
    ``queues``: the ConsumeQueues, to tell a damaged record from a damaged entry."""
    reader = RecordReader(commit_log, end_offset, set())
    budget = Budget()
    files = index.files
    file_shares = shares([max(f.index_count - 1, 0) for f in files], RECORD_BUDGET)
    previous: dict[int, IndexFile] = {i + 1: f for i, f in enumerate(files[:-1])}
    for i in range(len(files) - 1, -1, -1):  # newest first: the structure budget
        f = files[i]
        problem = check_index_file(f, previous.get(i), reader, budget, file_shares[i], queues)
        if problem:
            return f"index/{f.name}: {problem}"
    return ""
