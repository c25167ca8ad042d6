"""Passes 2 and 3 of the offline check (``verify.py``): derived files against the CommitLog.

* Rebuilds: side files, a job or a swap journal left in ``<root>/rebuild`` (``rebuild_dir``)
  mean a rebuild is unfinished: the store is half built until the next start or
  ``rebuildindex`` finishes it, so each is a defect (never "OK").
* ConsumeQueues: units up to the first invalid one (spec 3.1). Each must point at a valid
  record of its own topic and queue, with the record's size, QUEUEOFFSET and tag code; phys
  offsets strictly increase; only zeros follow the end. Blank units after real ones are the
  offsets of records missing from the CommitLog (a note). Every record the CommitLog pass
  counted must have its unit: a record missing below its queue's end is a hole (a defect
  whatever the exit); after a crash, records past the end are only noted (the next start
  dispatches them), unless the queue's directory is gone though the queue offset snapshot
  (``queue_snapshot.py``) knew its files. After a clean exit each queue must also reach the
  next offset its snapshot gives, unless its records all expired.
* IndexFiles: files that do not open (cut short, a header past the dimensions), then
  ``IndexService.check`` (headers, slot chains), then every entry must point at a valid
  record one of whose keys (``UNIQ_KEY``, ``KEYS``, spec 4.4) has the entry's hash, with
  the time_diff its store time gives (entry 1 excepted: RocketMQ computes it against the
  previous file's end, spec 4.5).

Units and entries pointing below the CommitLog's first segment are expired (cleanup removes
them later), not defects. Records are read at random through :class:`RecordReader`, so memory
stays flat whatever the store's size. Read-only throughout.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mqcore.errors import CorruptIndexError, StoreError
from mqcore.format.hashing import index_key_hash
from mqcore.format.layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from mqcore.format.properties import split_keys
from mqcore.format.record import Corrupt, DispatchRequest, decode_dispatch
from mqcore.store import queue_snapshot
from mqcore.store.commit_log import CommitLog
from mqcore.store.consume_queue import BLANK_SIZE, CQ_UNIT, CQ_UNIT_SIZE, ConsumeQueue
from mqcore.store.index.index_file import ENTRY, HEADER, MAX_TIME_DIFF, SLOT, IndexFile
from mqcore.store.index.index_service import IndexService
from mqcore.store.recovery import rebuild_dir
from mqcore.store.recovery.geometry import Geometry, segment_paths

__all__ = [
    "Findings",
    "IndexInfo",
    "Progress",
    "QueueInfo",
    "QueueTally",
    "RecordReader",
    "check_index",
    "check_queues",
    "entry_problems",
    "takes_unit",
    "unit_problem",
]

Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``; phases "commitlog" (bytes), "consumequeue" (bytes),
"index" (entries)."""

_CHUNK_BYTES = 1 << 20
_UNIT_CHUNK_BYTES = _CHUNK_BYTES // CQ_UNIT_SIZE * CQ_UNIT_SIZE
_EXT_ADDRESS_MAX = -(2**31) - 1  # tag slots at or below hold ConsumeQueueExt addresses (3.3)


class Findings(Protocol):
    """Where the passes put what they find (``verify.CheckReport``)."""

    last_exit_ok: bool
    notes: list[str]

    def defect(self, text: str) -> None: ...


@dataclass
class QueueInfo:
    topic: str
    queue_id: int
    files: int
    min_offset: int = 0  # first real unit (after blank pre-fill)
    max_offset: int = 0  # one past the last valid unit
    units_ok: int = 0
    expired_units: int = 0
    log_records: int = 0  # this queue's records found in the CommitLog


@dataclass
class IndexInfo:
    name: str
    entries: int
    max_entries: int
    begin_timestamp: int
    end_timestamp: int
    begin_phys_offset: int
    end_phys_offset: int
    expired_entries: int = 0


@dataclass
class QueueTally:
    """One queue's records in the CommitLog."""

    records: int = 0
    last_queue_offset: int = -1


def takes_unit(sys_flag: int) -> bool:
    return sys_flag & TRANSACTION_TYPE_MASK in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)


class RecordReader:
    """Random access to records for passes 2 and 3 (the last record is cached)."""

    def __init__(self, commit_log: CommitLog, end_offset: int, bad_offsets: set[int]) -> None:
        self.commit_log = commit_log
        self.min_offset = commit_log.min_offset
        self.end_offset = end_offset
        self.bad_offsets = bad_offsets
        self.levels = commit_log.delay_levels_ms
        self._last: tuple[int, DispatchRequest | str] = (-1, "")

    def at(self, phys: int) -> DispatchRequest | str | None:
        """The record at ``phys``; None below the log's start; else why there is none."""
        if phys < self.min_offset:
            return None
        if self._last[0] == phys:
            return self._last[1]
        found = self._read(phys)
        self._last = (phys, found)
        return found

    def _read(self, phys: int) -> DispatchRequest | str:
        if phys >= self.end_offset:
            return f"past the end of the CommitLog ({self.end_offset})"
        if phys in self.bad_offsets:
            return "a record whose body CRC does not match"
        segment = self.commit_log.segments.find(phys)
        if segment is None:
            return "in no CommitLog segment"
        pos = phys - segment.base_offset
        result = decode_dispatch(
            segment.buffer, pos, segment.file_size, delay_levels_ms=self.levels
        )
        if not isinstance(result, DispatchRequest):
            detail = result.detail if isinstance(result, Corrupt) else type(result).__name__
            return f"no valid record there ({detail})"
        if result.phys_offset != phys:
            return f"a record whose PHYSICALOFFSET says {result.phys_offset}"
        return result


# --- pass 2: ConsumeQueues ----------------------------------------------------------------


class _QueuePass:
    def __init__(
        self,
        root: Path,
        geometry: Geometry,
        reader: RecordReader,
        tallies: dict[tuple[str, int], QueueTally],
        findings: Findings,
        progress: Progress,
    ) -> None:
        self.directory = root / "consumequeue"
        self.file_size = geometry.consume_queue_file_size
        self.reader = reader
        self.tallies = tallies
        self.findings = findings
        self.progress = progress

    def run(self) -> list[QueueInfo]:
        for line in rebuild_dir.unfinished(self.directory.parent):
            self.findings.defect(f"{line} (the next start or rebuildindex finishes it)")
        dirs = self._queue_dirs()
        total = sum(len(segment_paths(d)) for _, _, d in dirs) * self.file_size
        done = 0
        infos: list[QueueInfo] = []
        for topic, queue_id, _ in dirs:
            queue = ConsumeQueue(self.directory, topic, queue_id, self.file_size, readonly=True)
            try:
                queue.load()
            except StoreError as exc:
                self.findings.defect(f"consumequeue/{topic}/{queue_id}: {exc}")
                continue
            for path, length in queue.segments.extended_files:
                self.findings.defect(
                    f"consumequeue/{topic}/{queue_id}/{path.name}: cut short, {length} bytes of "
                    f"{self.file_size} (the next start rebuilds the queue)"
                )
            try:
                info = self._check_queue(queue)
            finally:
                queue.close()
            infos.append(info)
            done += info.files * self.file_size
            self.progress("consumequeue", done, total)
        self._check_coverage(infos)
        return infos

    def _queue_dirs(self) -> list[tuple[str, int, Path]]:
        try:
            topics = sorted(p for p in self.directory.iterdir() if p.is_dir())
        except FileNotFoundError:
            return []
        found = []
        for topic_dir in topics:
            for queue_dir in sorted(topic_dir.iterdir()):
                name = queue_dir.name
                if (
                    queue_dir.is_dir()
                    and name.isascii()
                    and name.isdigit()
                    and str(int(name)) == name
                ):
                    found.append((topic_dir.name, int(name), queue_dir))
                else:
                    self.findings.notes.append(f"ignored {queue_dir}: not a queue directory")
        return sorted(found)

    def _check_queue(self, queue: ConsumeQueue) -> QueueInfo:
        files = queue.segments.files
        info = QueueInfo(queue.topic, queue.queue_id, len(files))
        info.min_offset = files[0].base_offset // CQ_UNIT_SIZE if files else 0
        name = f"consumequeue/{queue.topic}/{queue.queue_id}"
        state = _QueueState(info, name)
        for mapped in files:
            buf = mapped.buffer
            whole = mapped.file_size - mapped.file_size % CQ_UNIT_SIZE  # a cut file: its units
            for pos in range(0, whole, _UNIT_CHUNK_BYTES):
                data = buf[pos : min(pos + _UNIT_CHUNK_BYTES, whole)]
                first = (mapped.base_offset + pos) // CQ_UNIT_SIZE
                if state.ended:
                    state.after_end(data)
                    continue
                for i, (phys, size, tags) in enumerate(CQ_UNIT.iter_unpack(data)):
                    if not state.ended:
                        self._unit(state, first + i, phys, size, tags)
                    elif phys or size or tags:
                        state.garbage += 1
        if not state.ended and files:
            info.max_offset = (files[-1].base_offset + files[-1].file_size) // CQ_UNIT_SIZE
        if state.gap_blanks:
            self.findings.notes.append(
                f"{name}: {state.gap_blanks} blank unit(s) after real units: offsets of records "
                "missing from the CommitLog (a record there without its unit is counted below)"
            )
        if state.garbage:
            self.findings.defect(
                f"{name}: {state.garbage} non-zero units after the end of the queue at offset "
                f"{info.max_offset} (recovery truncates them)"
            )
        return info

    def _unit(self, state: _QueueState, offset: int, phys: int, size: int, tags: int) -> None:
        info = state.info
        if phys < 0 or size <= 0:
            state.end(offset)
            if phys or size or tags:
                state.garbage += 1
            return
        if phys == 0 and size == BLANK_SIZE:
            if state.seen_real:
                state.gap_blanks += 1  # a record missing from the CommitLog keeps its offset
            else:
                info.min_offset = offset + 1
            return
        state.seen_real = True
        where = f"{state.name} offset {offset} (phys {phys})"
        if phys <= state.last_phys:
            self.findings.defect(f"{where}: not after the previous unit's phys {state.last_phys}")
        state.last_phys = phys
        record = self.reader.at(phys)
        if record is None:
            info.expired_units += 1
            return
        problem = unit_problem(record, info.topic, info.queue_id, offset, size, tags)
        if problem:
            self.findings.defect(f"{where}: {problem}")
        else:
            info.units_ok += 1

    def _check_coverage(self, infos: list[QueueInfo]) -> None:
        """Every record of a queue has its unit at its queue offset. After a crash, records
        past the queue's end may wait for the next start to dispatch them (a note); a record
        missing below the end is a hole, and a queue whose directory is gone though the
        queue offset snapshot knew its files (``queue_snapshot.py``) is lost: both are
        defects whatever the exit. After a clean exit, each queue also reaches the next
        offset its snapshot gives, unless its records all expired."""
        found = {(q.topic, q.queue_id): q for q in infos}
        snapshot = self._snapshot()
        known = snapshot.entries if snapshot is not None else {}
        reported: set[tuple[str, int]] = set()
        for (topic, queue_id), tally in sorted(self.tallies.items()):
            queue = found.get((topic, queue_id))
            covered = queue.units_ok if queue else 0
            end = queue.max_offset if queue else 0
            if queue:
                queue.log_records = tally.records
            missing = tally.records - covered
            if missing <= 0:
                continue
            text = (
                f"consumequeue/{topic}/{queue_id}: {missing} of its {tally.records} records "
                f"in the CommitLog have no unit (the log reaches queue offset "
                f"{tally.last_queue_offset}, the queue ends at {end})"
            )
            at_tail = missing <= tally.last_queue_offset + 1 - end
            entry = known.get((topic, queue_id))
            lost = (
                queue is None
                and snapshot is not None
                and entry is not None
                and self.reader.min_offset < entry.last_phys_end < snapshot.log_offset
            )
            reported.add((topic, queue_id))
            if self.findings.last_exit_ok or not at_tail:
                self.findings.defect(text)
            elif lost:
                self.findings.defect(text + "; its directory is gone (the next start rebuilds it)")
            else:
                self.findings.notes.append(text + "; the next start dispatches them")
        if snapshot is not None and self.findings.last_exit_ok:
            self._check_snapshot(snapshot, found, reported)

    def _snapshot(self) -> queue_snapshot.QueueOffsetSnapshot | None:
        snapshot = queue_snapshot.read(self.directory.parent)
        if snapshot is not None and snapshot.log_offset > self.reader.end_offset:
            self.findings.notes.append(
                f"queue offset snapshot taken at {snapshot.log_offset}, past the CommitLog end"
            )
            return None
        return snapshot

    def _check_snapshot(
        self,
        snapshot: queue_snapshot.QueueOffsetSnapshot,
        found: dict[tuple[str, int], QueueInfo],
        reported: set[tuple[str, int]],
    ) -> None:
        for (topic, queue_id), entry in sorted(snapshot.entries.items()):
            queue = found.get((topic, queue_id))
            end = queue.max_offset if queue else 0
            if (
                (topic, queue_id) in reported
                or end >= entry.next_offset
                or 0 <= entry.last_phys_end <= self.reader.min_offset
            ):
                continue
            self.findings.defect(
                f"consumequeue/{topic}/{queue_id}: ends at queue offset {end}, below "
                f"{entry.next_offset} in the queue offset snapshot (the next start rebuilds it)"
            )


@dataclass
class _QueueState:
    info: QueueInfo
    name: str
    ended: bool = False
    seen_real: bool = False
    last_phys: int = -1
    garbage: int = 0
    gap_blanks: int = 0

    def end(self, offset: int) -> None:
        self.ended = True
        self.info.max_offset = offset

    def after_end(self, data: bytes) -> None:
        if data.count(0) != len(data):
            self.garbage += sum(1 for unit in CQ_UNIT.iter_unpack(data) if any(unit))


def unit_problem(
    record: DispatchRequest | str, topic: str, queue_id: int, offset: int, size: int, tags: int
) -> str:
    """What is wrong with the unit (``offset``: its queue offset; ``size``, ``tags``: its
    fields) of queue ``topic``/``queue_id`` pointing at ``record`` ("" when nothing)."""
    if isinstance(record, str):
        return f"points at {record}"
    if (record.topic, record.queue_id) != (topic, queue_id):
        return f"points at a record of {record.topic}/{record.queue_id}"
    if not takes_unit(record.sys_flag):
        return "points at a prepared or rolled-back transaction record"
    if record.size != size:
        return f"size {size}, the record's TOTALSIZE is {record.size}"
    if record.queue_offset != offset:
        return f"the record's QUEUEOFFSET is {record.queue_offset}"
    if tags > _EXT_ADDRESS_MAX and tags != record.tags_code:
        return f"tag code {tags}, the record's is {record.tags_code}"
    return ""


# --- pass 3: IndexFiles -------------------------------------------------------------------


class _IndexPass:
    def __init__(
        self,
        root: Path,
        geometry: Geometry,
        reader: RecordReader,
        findings: Findings,
        progress: Progress,
    ) -> None:
        self.root = root
        self.slots = geometry.index_hash_slots
        self.max_entries = geometry.index_max_entries
        self.reader = reader
        self.findings = findings
        self.progress = progress

    def run(self) -> list[IndexInfo]:
        service = IndexService(self.root, self.slots, self.max_entries, readonly=True)
        try:
            service.load(True, 0)
            files = service.files
            for name, why in service.damaged_files:
                self.findings.defect(f"index/{name}: {why}")
            for line in service.check():
                self.findings.defect(f"index/{line}")
        except (CorruptIndexError, ValueError):
            files = self._open_one_by_one()  # reports each file that cannot be opened
        infos: list[IndexInfo] = []
        try:
            total = sum(f.index_count - 1 for f in files)
            done = 0
            for f in files:
                infos.append(self._check_entries(f))
                done += f.index_count - 1
                self.progress("index", done, total)
        finally:
            service.close()
            for f in files:
                f.close()
        return infos

    def _open_one_by_one(self) -> list[IndexFile]:
        files = []
        for path in segment_paths(self.root / "index", 17):
            try:
                f = IndexFile.open(str(path), self.slots, self.max_entries, readonly=True)
            except (CorruptIndexError, OSError, ValueError) as exc:
                detail = str(exc)
                if path.stat().st_size == 0:
                    detail = (
                        "empty file, left by a crash while it was being created; "
                        "the store does not open until it is removed"
                    )
                self.findings.defect(f"index/{path.name}: {detail}")
                continue
            for line in f.check():
                self.findings.defect(f"index/{line}")
            files.append(f)
        return files

    def _check_entries(self, f: IndexFile) -> IndexInfo:
        info = IndexInfo(
            f.name, f.index_count - 1, f.max_entries, f.begin_timestamp, f.end_timestamp,
            f.begin_phys_offset, f.end_phys_offset,
        )  # fmt: skip
        entry_base = HEADER.size + f.hash_slots * SLOT.size
        per_chunk = _CHUNK_BYTES // ENTRY.size
        with open(f.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            for first in range(1, f.index_count, per_chunk):
                stop = min(f.index_count, first + per_chunk)
                data = mm[entry_base + first * ENTRY.size : entry_base + stop * ENTRY.size]
                for i, entry in enumerate(ENTRY.iter_unpack(data)):
                    self._entry(f, info, first + i, *entry)
        return info

    def _entry(
        self, f: IndexFile, info: IndexInfo, index: int, key_hash: int, phys: int, diff: int, _: int
    ) -> None:
        record = self.reader.at(phys)
        if record is None:
            info.expired_entries += 1
            return
        where = f"index/{f.name} entry {index} (phys {phys})"
        for problem in entry_problems(record, index, key_hash, diff, f.begin_timestamp):
            self.findings.defect(f"{where}: {problem}")


def entry_problems(
    record: DispatchRequest | str, index: int, key_hash: int, diff: int, begin_timestamp: int
) -> list[str]:
    """What is wrong with index entry ``index`` (its ``key_hash`` and ``time_diff``, in a
    file beginning at ``begin_timestamp``) pointing at ``record``; empty when nothing."""
    if isinstance(record, str):
        return [f"points at {record}"]
    problems: list[str] = []
    if record.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_ROLLBACK_TYPE:
        problems.append("points at a rolled-back transaction record")
    keys = [*split_keys(record.keys), *([record.uniq_key] if record.uniq_key else [])]
    if key_hash not in {index_key_hash(f"{record.topic}#{key}") for key in keys}:
        problems.append(
            f"key hash {key_hash} matches no key of the record (topic {record.topic}, keys {keys})"
        )
    if index > 1 and begin_timestamp > 0:
        expected = min(max((record.store_timestamp - begin_timestamp) // 1000, 0), MAX_TIME_DIFF)
        if diff != expected:
            problems.append(f"time_diff {diff}s, the record's store time gives {expected}s")
    return problems


def check_queues(
    root: Path,
    geometry: Geometry,
    reader: RecordReader,
    tallies: dict[tuple[str, int], QueueTally],
    findings: Findings,
    progress: Progress,
) -> list[QueueInfo]:
    """Pass 2: every ConsumeQueue unit (module docstring). Returns one summary per queue."""
    return _QueuePass(root, geometry, reader, tallies, findings, progress).run()


def check_index(
    root: Path, geometry: Geometry, reader: RecordReader, findings: Findings, progress: Progress
) -> list[IndexInfo]:
    """Pass 3: every index file and entry (module docstring). Returns one summary per file."""
    return _IndexPass(root, geometry, reader, findings, progress).run()
