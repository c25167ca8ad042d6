"""Offline check of a whole store: every CommitLog record, ConsumeQueue unit and index entry.

``python -m mqcore check`` runs it; it is importable too (tests, an admin API). It never
writes: segments are mapped ``ACCESS_READ``, index files opened ``O_RDONLY``, the writer lock
is not taken and no recovery runs. Next to a live broker it sees a moving tail, so defects at
the very end may be writes in flight.

Passes, in order:

1. CommitLog, oldest segment first. Each record is framed and its body CRC recomputed (what
   recovery checks, spec 5.5), its PHYSICALOFFSET field must equal its position and its topic
   must be a name a broker accepts (no CRC covers the topic bytes). A segment other than
   the newest must end with a blank record (spec 1.4). A record that fails its checks is
   followed by a search for valid records, as recovery does (``record_search``): if one
   follows (in the segment or a later one), the bytes in between are *mid-log corruption*,
   a defect that names the range, where records resume and whether it is quarantined yet
   (and acknowledged); checking goes on after it. Bad bytes that no valid record follows
   are a torn tail that the next start cuts (after copying it to the quarantine), and after
   the newest segment's last record only zeros may follow. The bytes after a segment's
   records are read with ``pread``, never through the mapping.
2. ConsumeQueues, then 3. IndexFiles, in ``verify_derived`` (its docstring has the rules):
   every unit and entry must point at a valid record that matches it, and every record of
   pass 1 must have its unit.

Units and entries pointing below the CommitLog's first segment are expired (cleanup removes
them later), not defects. Each defect is one line naming the file and the position.

The quarantine (``<root>/quarantine/``: ranges recovery or reads found corrupt, and torn
tails recovery cut) is listed in the report with each range's health problem status. A
corrupt range is still in the log, so a store holding one never checks OK.

Cost: one sequential read of the CommitLog (CRC included), then one random record read per
unit and per index entry (the last record read is cached). On the shared CI box that is about
25,000 records a second for records of 300 bytes with one unit and two index entries each, so
a full 1 GiB segment takes two to three minutes. Memory: per-queue counters, plus the offsets
of records with a bad CRC and of corrupt ranges.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mqcore.clock import SystemClock
from mqcore.errors import StoreError, ValidationError
from mqcore.format.record import (
    Blank,
    Corrupt,
    DispatchRequest,
    RecordCheck,
    Valid,
    check_record,
    decode_dispatch,
)
from mqcore.store.commit_log import CommitLog
from mqcore.store.files.mapped_file import MappedFile
from mqcore.store.health import StoreHealth
from mqcore.store.recovery.checkpoint import Checkpoint
from mqcore.store.recovery.geometry import Geometry
from mqcore.store.recovery.quarantine import Quarantine, QuarantineEntry
from mqcore.store.recovery.record_search import SegmentFile
from mqcore.store.recovery.verify_derived import (
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

__all__ = [
    "CheckReport",
    "IndexInfo",
    "Progress",
    "QuarantineInfo",
    "QueueInfo",
    "SegmentInfo",
    "check_store",
]

MAX_KEPT_DEFECTS = 10_000  # lines kept in the report; all are counted
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
class QuarantineInfo:
    """One quarantine entry and the status of the health problem that reports it
    (``acknowledged`` None: no such problem in ``health.json``)."""

    name: str
    kind: str
    offset: int
    end: int
    length: int
    segment: str
    position: int
    copied_bytes: int
    reason: str
    found_by: str
    found_ms: int
    messages: str
    acknowledged: bool | None
    acknowledged_by: str | None = None


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
    quarantine: list[QuarantineInfo] = field(default_factory=list)
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
    quarantine = Quarantine(root, readonly=True).load()
    report.quarantine = _quarantine_infos(root, quarantine.entries())
    try:
        log = _LogScan(commit_log, report, report_progress, quarantine)
        log.run()
        log.unseen_quarantine()
        reader = RecordReader(commit_log, report.log_end_offset, log.bad_offsets)
        report.queues = check_queues(root, geometry, reader, log.tallies, report, report_progress)
        report.index_files = check_index(root, geometry, reader, report, report_progress)
    finally:
        commit_log.close()
    return report


def _quarantine_infos(root: Path, entries: list[QuarantineEntry]) -> list[QuarantineInfo]:
    problems = {
        p.id: p for p in StoreHealth(root, readonly=True).load().problems(include_acknowledged=True)
    }
    infos = []
    for e in entries:
        problem = problems.get(e.problem_id)
        infos.append(
            QuarantineInfo(
                name=e.name,
                kind=e.kind,
                offset=e.offset,
                end=e.end,
                length=e.length,
                segment=e.segment,
                position=e.position,
                copied_bytes=e.copied_bytes,
                reason=e.reason,
                found_by=e.found_by,
                found_ms=e.found_ms,
                messages=e.describe_records(),
                acknowledged=None if problem is None else problem.acknowledged,
                acknowledged_by=None if problem is None else problem.acknowledged_by,
            )
        )
    return infos


# --- pass 1: the CommitLog ----------------------------------------------------------------


class _LogScan:
    def __init__(
        self,
        commit_log: CommitLog,
        report: CheckReport,
        progress: Progress,
        quarantine: Quarantine,
    ) -> None:
        self.commit_log = commit_log
        self.report = report
        self.progress = progress
        self.quarantine = quarantine
        self.levels = commit_log.delay_levels_ms
        self.tallies: dict[tuple[str, int], QueueTally] = {}
        self.bad_offsets: set[int] = set()
        self.bad_ranges: list[tuple[int, int]] = []
        self.first_base = 0
        self.total_bytes = 0
        self._files = commit_log.segments.files
        #: Where valid records resume when a segment's bad bytes run to its end.
        self._resume_from: tuple[int, int] | None = None

    def run(self) -> None:
        files = self._files
        report = self.report
        self.first_base = report.log_min_offset = files[0].base_offset if files else 0
        self.total_bytes = sum(f.file_size for f in files)
        for i, segment in enumerate(files):
            info = SegmentInfo(segment.path.name, segment.base_offset)
            report.segments.append(info)
            start = 0
            if self._resume_from is not None and self._resume_from[0] == i:
                start = self._resume_from[1]
            if self._resume_from is None or self._resume_from[0] <= i:
                with SegmentFile(segment.path, self.commit_log.file_size) as f:
                    end = self._scan_segment(segment, f, info, i, start)
                report.log_end_offset = segment.base_offset + end
            self.progress("commitlog", (i + 1) * segment.file_size, self.total_bytes)

    def _where(self, segment: MappedFile, pos: int) -> str:
        return f"commitlog/{segment.path.name}@{pos} (phys {segment.base_offset + pos})"

    def _scan_segment(
        self, segment: MappedFile, f: SegmentFile, info: SegmentInfo, index: int, pos: int
    ) -> int:
        """Check the records of one segment from ``pos``; return where its data ends."""
        buf = segment.buffer
        size = segment.file_size
        limit = min(size, f.data_end())
        total = self.total_bytes
        while True:
            result: RecordCheck
            if pos < limit:
                result = check_record(buf, pos, limit, check_crc=True)
            else:
                result = Corrupt(0, "end of written data")
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
            found = f.resume_after(pos, segment.base_offset)
            if found is not None:
                self._mid_log(segment, pos, found[0], result)
                pos = found[0]
                continue
            later = self._later_record(index)
            if later is not None:
                self._mid_log(segment, pos, size, result, resume=later)
                info.used_bytes = pos
                return pos
            self._end_of_data(segment, f, pos, result, newest=index == len(self._files) - 1)
            info.used_bytes = pos
            return pos

    def unseen_quarantine(self) -> None:
        """A quarantined range still in the log is a defect even where the scan found none
        (its bytes may pass the format checks: a topic byte, a unit that framed them)."""
        low, high = self.report.log_min_offset, self.report.log_end_offset
        for entry in self.quarantine.ranges:
            if not low <= entry.offset < high:
                continue
            if any(a < entry.end and entry.offset < b for a, b in self.bad_ranges):
                continue
            self.report.defect(
                f"quarantine/{entry.name}: CommitLog {entry.offset}..{entry.end} is "
                f"quarantined ({entry.reason}; found by {entry.found_by}) and still in the log"
            )

    def _later_record(self, index: int) -> int | None:
        """The CommitLog offset of the first valid record in a segment after ``index``
        (remembered so that the scan resumes there)."""
        for j in range(index + 1, len(self._files)):
            segment = self._files[j]
            with SegmentFile(segment.path, self.commit_log.file_size) as f:
                found = f.find_valid(0, f.file_size, segment.base_offset)
            if found is not None:
                self._resume_from = (j, found[0])
                return segment.base_offset + found[0]
        return None

    def _mid_log(
        self,
        segment: MappedFile,
        pos: int,
        end: int,
        result: RecordCheck,
        *,
        resume: int | None = None,
    ) -> None:
        """Bad bytes ``[pos, end)`` of ``segment`` with valid records after them."""
        offset = segment.base_offset + pos
        resume = segment.base_offset + end if resume is None else resume
        self.bad_offsets.add(offset)
        self.bad_ranges.append((offset, segment.base_offset + end))
        why = _failure(result)
        entry = self.quarantine.covering(offset)
        if entry is None:
            status = "not quarantined yet (the next start or read that meets it does)"
        else:
            info = next((q for q in self.report.quarantine if q.name == entry.name), None)
            if info is None or info.acknowledged is None:
                status = f"quarantined ({entry.name})"
            elif info.acknowledged:
                status = f"quarantined ({entry.name}), acknowledged by {info.acknowledged_by}"
            else:
                status = f"quarantined ({entry.name}), not acknowledged"
        self.report.defect(
            f"{self._where(segment, pos)}: {why}; mid-log corruption: "
            f"{segment.base_offset + end - offset} bytes, valid records resume at phys "
            f"{resume}; {status}"
        )

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

    def _end_of_data(
        self, segment: MappedFile, f: SegmentFile, pos: int, result: RecordCheck, *, newest: bool
    ) -> None:
        """No record at ``pos`` and none after it: the end of the log, or a torn tail."""
        garbage = f.nonzero_end(pos, segment.file_size) - pos
        where = self._where(segment, pos)
        if garbage:
            tail = "torn tail" if newest else "unreadable data"
            self.report.defect(
                f"{where}: {_failure(result)}; {garbage} bytes of {tail} up to the segment end "
                "(no valid record follows: recovery copies them to the quarantine and "
                "truncates the log here when it scans this segment)"
            )
        elif not newest:
            self.report.defect(f"{where}: segment ends without an end-of-file blank record")


def _failure(result: RecordCheck) -> str:
    if isinstance(result, Corrupt):
        return result.detail
    return "record runs past its segment"
