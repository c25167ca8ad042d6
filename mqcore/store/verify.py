"""Offline check of a whole store: every CommitLog record, ConsumeQueue unit and index entry.

``python -m mqcore check`` runs it; it is importable too (tests, an admin API). It never
writes: segments are mapped ``ACCESS_READ``, index files opened ``O_RDONLY``, the writer lock
is not taken and no recovery runs. Next to a live broker it sees a moving tail, so defects at
the very end may be writes in flight.

Passes, in order:

1. CommitLog, oldest segment first. Each record is framed and its body CRC recomputed (what
   recovery checks, spec 5.5), its PHYSICALOFFSET field must equal its position and its topic
   must be a name a broker accepts (no CRC covers the topic bytes). A segment other than
   the newest must end with a blank record (spec 1.4); after the newest segment's
   last record only zeros may follow: anything else is a torn tail that the next start
   truncates. A record with a bad CRC is skipped by its TOTALSIZE so that later records are
   still checked; a record that cannot be framed ends its segment.
2. ConsumeQueues, then 3. IndexFiles, in ``verify_derived`` (its docstring has the rules):
   every unit and entry must point at a valid record that matches it, and every record of
   pass 1 must have its unit.

Units and entries pointing below the CommitLog's first segment are expired (cleanup removes
them later), not defects. Each defect is one line naming the file and the position.

Cost: one sequential read of the CommitLog (CRC included), then one random record read per
unit and per index entry (the last record read is cached). On the shared CI box that is about
25,000 records a second for records of 300 bytes with one unit and two index entries each, so
a full 1 GiB segment takes two to three minutes. Memory: per-queue counters, plus the offsets
of records with a bad CRC.
"""

from __future__ import annotations

import mmap
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mqcore.clock import SystemClock
from mqcore.errors import StoreError, ValidationError
from mqcore.store.checkpoint import Checkpoint
from mqcore.store.commit_log import CommitLog
from mqcore.store.format import (
    Blank,
    Corrupt,
    DispatchRequest,
    Valid,
    check_record,
    decode_dispatch,
)
from mqcore.store.geometry import Geometry
from mqcore.store.mapped_file import MappedFile
from mqcore.store.verify_derived import (
    IndexInfo,
    Progress,
    QueueInfo,
    QueueTally,
    RecordReader,
    check_index,
    check_queues,
    takes_unit,
)
from mqcore.validation import validate_topic

__all__ = ["CheckReport", "IndexInfo", "Progress", "QueueInfo", "SegmentInfo", "check_store"]

MAX_KEPT_DEFECTS = 10_000  # lines kept in the report; all are counted
_CHUNK_BYTES = 1 << 20
_PROGRESS_RECORDS = 1 << 14  # records between progress calls within a segment


@dataclass
class SegmentInfo:
    name: str
    base_offset: int
    records: int = 0
    used_bytes: int = 0  # up to the end of the last record, or of the blank record
    ends_with_blank: bool = False
    first_store_ms: int = 0
    last_store_ms: int = 0


@dataclass
class SizeStats:
    count: int = 0
    total_bytes: int = 0
    min_bytes: int = 0
    max_bytes: int = 0

    def add(self, size: int) -> None:
        self.min_bytes = size if not self.count else min(self.min_bytes, size)
        self.max_bytes = max(self.max_bytes, size)
        self.count += 1
        self.total_bytes += size

    @property
    def mean_bytes(self) -> float:
        return self.total_bytes / self.count if self.count else 0.0


@dataclass
class CheckReport:
    """What ``check_store`` found. ``ok`` means no defect."""

    root: str
    geometry: Geometry
    last_exit_ok: bool
    checkpoint: dict[str, int] = field(default_factory=dict)
    log_min_offset: int = 0
    log_end_offset: int = 0
    segments: list[SegmentInfo] = field(default_factory=list)
    queues: list[QueueInfo] = field(default_factory=list)
    index_files: list[IndexInfo] = field(default_factory=list)
    record_sizes: SizeStats = field(default_factory=SizeStats)
    defects: list[str] = field(default_factory=list)
    defect_count: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.defect_count == 0

    def defect(self, text: str) -> None:
        self.defect_count += 1
        if len(self.defects) < MAX_KEPT_DEFECTS:
            self.defects.append(text)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["geometry"] = {k: v for k, v in data["geometry"].items() if k != "notes"}
        data["geometry"]["notes"] = list(self.geometry.notes)
        data["record_sizes"]["mean_bytes"] = round(self.record_sizes.mean_bytes, 1)
        data["ok"] = self.ok
        return data


def _silent(phase: str, done: int, total: int) -> None:
    pass


def check_store(
    root: str | Path, geometry: Geometry, *, progress: Progress | None = None
) -> CheckReport:
    """Check the store at ``root`` read-only (module docstring). Never raises for defects.

    Args:
        root: the store directory.
        geometry: its sizes (``geometry.infer_geometry``).
        progress: called now and then during each pass.

    Returns:
        The report: summaries, notes and one line per defect.

    Raises:
        OSError: a directory cannot be listed.
    """
    root = Path(root)
    report = CheckReport(str(root), geometry, last_exit_ok=not (root / "abort").exists())
    checkpoint = Checkpoint.load(root / "checkpoint")
    report.checkpoint = {
        "physic_msg_timestamp": checkpoint.physic_msg_timestamp,
        "logics_msg_timestamp": checkpoint.logics_msg_timestamp,
        "index_msg_timestamp": checkpoint.index_msg_timestamp,
        "confirm_phy_offset": checkpoint.confirm_phy_offset,
    }
    if not report.last_exit_ok:
        report.notes.append("abort file present: the last run did not shut down cleanly")
    report_progress = progress or _silent
    try:
        commit_log = CommitLog(root, geometry.store_config(), SystemClock(), readonly=True)
        commit_log.load()
    except (StoreError, ValidationError) as exc:
        report.defect(f"commitlog: {exc}")
        return report
    try:
        log = _LogScan(commit_log, report, report_progress)
        log.run()
        reader = RecordReader(commit_log, report.log_end_offset, log.bad_offsets)
        report.queues = check_queues(root, geometry, reader, log.tallies, report, report_progress)
        report.index_files = check_index(root, geometry, reader, report, report_progress)
    finally:
        commit_log.close()
    return report


# --- pass 1: the CommitLog ----------------------------------------------------------------


class _LogScan:
    def __init__(self, commit_log: CommitLog, report: CheckReport, progress: Progress) -> None:
        self.commit_log = commit_log
        self.report = report
        self.progress = progress
        self.levels = commit_log.delay_levels_ms
        self.tallies: dict[tuple[str, int], QueueTally] = {}
        self.bad_offsets: set[int] = set()
        self.first_base = 0
        self.total_bytes = 0

    def run(self) -> None:
        files = self.commit_log.segments.files
        report = self.report
        self.first_base = report.log_min_offset = files[0].base_offset if files else 0
        self.total_bytes = sum(f.file_size for f in files)
        for i, segment in enumerate(files):
            info = SegmentInfo(segment.path.name, segment.base_offset)
            report.segments.append(info)
            end = self._scan_segment(segment, info, newest=i == len(files) - 1)
            report.log_end_offset = segment.base_offset + end
            self.progress("commitlog", (i + 1) * segment.file_size, self.total_bytes)

    def _where(self, segment: MappedFile, pos: int) -> str:
        return f"commitlog/{segment.path.name}@{pos} (phys {segment.base_offset + pos})"

    def _scan_segment(self, segment: MappedFile, info: SegmentInfo, *, newest: bool) -> int:
        """Check the records of one segment; return where its data ends."""
        buf = segment.buffer
        size = segment.file_size
        total = self.total_bytes
        pos = 0
        while True:
            result = check_record(buf, pos, size, check_crc=True)
            if isinstance(result, Valid):
                self._record(segment, pos, result, info)
                pos += result.size
                if not info.records % _PROGRESS_RECORDS:
                    self.progress("commitlog", segment.base_offset - self.first_base + pos, total)
                continue
            if isinstance(result, Blank):
                info.ends_with_blank = True
                info.used_bytes = size
                return size
            framed = check_record(buf, pos, size, check_crc=False)
            if isinstance(result, Corrupt) and isinstance(framed, Valid):
                self.report.defect(f"{self._where(segment, pos)}: {result.detail}")
                self.bad_offsets.add(segment.base_offset + pos)
                pos += framed.size
                continue
            self._end_of_data(segment, pos, result, newest=newest)
            info.used_bytes = pos
            return pos

    def _record(self, segment: MappedFile, pos: int, valid: Valid, info: SegmentInfo) -> None:
        phys = segment.base_offset + pos
        if valid.phys_offset != phys:
            self.report.defect(
                f"{self._where(segment, pos)}: PHYSICALOFFSET field says {valid.phys_offset}"
            )
        request = decode_dispatch(
            segment.buffer, pos, segment.file_size, delay_levels_ms=self.levels
        )
        if isinstance(request, DispatchRequest):
            self._check_topic(segment, pos, request.topic)
        info.records += 1
        info.first_store_ms = info.first_store_ms or valid.store_timestamp
        info.last_store_ms = valid.store_timestamp
        self.report.record_sizes.add(valid.size)
        if isinstance(request, DispatchRequest) and takes_unit(request.sys_flag):
            tally = self.tallies.setdefault((request.topic, request.queue_id), QueueTally())
            tally.records += 1
            tally.last_queue_offset = max(tally.last_queue_offset, request.queue_offset)

    def _check_topic(self, segment: MappedFile, pos: int, topic: str) -> None:
        """The topic bytes carry no CRC: a flipped byte there passes every format check."""
        try:
            validate_topic(topic)
        except ValidationError as exc:
            if exc.rule != "max_length":
                self.report.defect(f"{self._where(segment, pos)}: topic {topic!r}: {exc}")

    def _end_of_data(self, segment: MappedFile, pos: int, result: object, *, newest: bool) -> None:
        """No record at ``pos``: the end of the log, a torn tail, or corruption."""
        garbage = _last_nonzero_end(segment.buffer, pos, segment.file_size) - pos
        where = self._where(segment, pos)
        if garbage:
            why = result.detail if isinstance(result, Corrupt) else "record runs past its segment"
            tail = "torn tail" if newest else "unreadable data"
            self.report.defect(
                f"{where}: {why}; {garbage} bytes of {tail} up to the segment end "
                "(recovery truncates the log here when it scans this segment)"
            )
        elif not newest:
            self.report.defect(f"{where}: segment ends without an end-of-file blank record")


def _last_nonzero_end(buf: mmap.mmap, start: int, end: int) -> int:
    """One past the last non-zero byte of ``buf[start:end]`` (``start`` if all zero)."""
    while end > start:
        low = max(start, end - _CHUNK_BYTES)
        piece = buf[low:end].rstrip(b"\0")
        if piece:
            return low + len(piece)
        end = low
    return start
