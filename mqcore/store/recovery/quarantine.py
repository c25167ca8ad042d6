"""The CommitLog quarantine: bad ranges of the log are copied aside, reported and skipped,
never erased.

A range that fails its checks but is followed by valid records (a flipped byte, a damaged
sector, a segment cut short in the middle of the log) is *corrupt*: its bytes stay where
they are, a copy and a report go to ``<root>/quarantine/``, the range enters the table that
reput and every reader consult (they skip it, with a logged error), and the store's health
gets a problem until an operator acknowledges it. Bytes after the last valid record that no
valid record follows are a *torn tail*: recovery cuts them, but copies them here first, so
that a misjudged tail is never lost either. Layout::

    <root>/quarantine/<offset:020d>.bin           a corrupt range's bytes (trailing zeros
    <root>/quarantine/<offset:020d>.json          left out) and its report
    <root>/quarantine/tail-<offset:020d>-<ms>.bin     a cut torn tail (offsets are reused
    <root>/quarantine/tail-<offset:020d>-<ms>.json    after a cut: the time tells them apart)

A report holds: ``kind`` (``corrupt`` / ``torn_tail``), ``segment`` (``commitlog/<name>``),
``position`` in that file, ``offset`` in the CommitLog, ``length`` of the range, ``end``
(where valid records resume, for a corrupt range), ``copied_bytes``, ``reason``,
``found_ms``, ``found_by`` (``recovery``, ``read``, ``check``: the start check of the
derived files, or ``rebuild``: a rebuild's walk of the log) and ``records``: the
headers inside the range that still read (their PHYSICALOFFSET field equals their position):
topic, queue id and queue offset of each message the range holds.

Invariants: corrupt ranges never overlap; a corrupt range is reported once (its file name
is its offset, so every process and every start finds the same one). The table only grows
while a store is open.

Crash behaviour: the copy is written before the report (each to a temporary name, fsynced,
renamed, then the directory fsynced) and the table is loaded from the reports only: a crash
in between leaves an orphan ``.bin``; the bytes are still in the log, and the next recovery
or read that meets them quarantines them again.

Thread-safety: every public method is thread-safe; the table is a tuple replaced whole, so
readers take no lock.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from mqcore.clock import Clock, SystemClock
from mqcore.errors import ValidationError
from mqcore.format.layout import (
    HEADER_SIZES,
    INT32,
    INT64,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    PHYS_OFFSET_POSITION,
    QUEUE_ID_POSITION,
    QUEUE_OFFSET_POSITION,
    SYSFLAG_POSITION,
    TOPIC_LENGTH_V1,
    TOPIC_LENGTH_V2,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
)
from mqcore.store.files.mapped_file import fsync_directory
from mqcore.store.health import StoreHealth
from mqcore.store.recovery.record_search import SegmentFile
from mqcore.validation import validate_topic

log = logging.getLogger(__name__)

DIRECTORY = "quarantine"
PROBLEM_KIND = "quarantine"
#: How often readers look for ranges another process quarantined (a stat of the directory).
REFRESH_INTERVAL_S = 1.0
#: Skips logged at ERROR per process (then at DEBUG): one line per range and reader.
_LOGGED_MAX = 10_000

Kind = Literal["corrupt", "torn_tail"]
FoundBy = Literal["recovery", "read", "check", "rebuild"]

_MAGICS = tuple(
    c.to_bytes(4, "big", signed=True) for c in (MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2)
)


@dataclass(frozen=True)
class LostRecord:
    """A message header that still reads inside a quarantined range."""

    offset: int
    topic: str | None
    queue_id: int
    queue_offset: int


@dataclass(frozen=True)
class QuarantineEntry:
    """One quarantined range (module docstring: the report's fields)."""

    name: str
    kind: Kind
    offset: int
    length: int
    segment: str
    position: int
    copied_bytes: int
    reason: str
    found_ms: int
    found_by: str
    records: tuple[LostRecord, ...] = field(default=())

    @property
    def end(self) -> int:
        """The offset after the range: where valid records resume (corrupt ranges)."""
        return self.offset + self.length

    @property
    def problem_id(self) -> str:
        """The store health problem that reports this range."""
        return (
            f"{PROBLEM_KIND}:{self.offset:020d}"
            if self.kind == "corrupt"
            else f"{PROBLEM_KIND}:{self.name}"
        )

    def describe_records(self, limit: int = 5) -> str:
        named = [
            f"{r.topic}-{r.queue_id} offset {r.queue_offset}"
            if r.topic
            else f"queue {r.queue_id} offset {r.queue_offset}"
            for r in self.records[:limit]
        ]
        more = len(self.records) - len(named)
        return ", ".join(named) + (f" and {more} more" if more > 0 else "")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["end"] = self.end
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QuarantineEntry:
        records = tuple(
            LostRecord(int(r["offset"]), r.get("topic"), int(r["queue_id"]), int(r["queue_offset"]))
            for r in data.get("records", ())
        )
        kind = data["kind"]
        if kind not in ("corrupt", "torn_tail"):
            raise ValueError(f"unknown kind {kind!r}")
        return cls(
            name=str(data["name"]),
            kind=kind,
            offset=int(data["offset"]),
            length=int(data["length"]),
            segment=str(data["segment"]),
            position=int(data["position"]),
            copied_bytes=int(data["copied_bytes"]),
            reason=str(data["reason"]),
            found_ms=int(data["found_ms"]),
            found_by=str(data["found_by"]),
            records=records,
        )


class Quarantine:
    """The quarantine of the store at ``root`` (module docstring).

    Args:
        root: the store directory.
        clock: stamps ``found_ms``.
        readonly: nothing is written (tools reading a store): ranges found are kept in
            memory, so that this process still skips them.
        health: where problems are reported (None: only logged).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        clock: Clock | None = None,
        *,
        readonly: bool = False,
        health: StoreHealth | None = None,
    ) -> None:
        self.directory = Path(root) / DIRECTORY
        self.clock: Clock = clock or SystemClock()
        self.readonly = readonly
        self.health = health
        self._lock = threading.Lock()
        #: Corrupt ranges by offset: the table readers consult (a tuple, replaced whole).
        self.ranges: tuple[QuarantineEntry, ...] = ()
        self._starts: tuple[int, ...] = ()
        self._tails: list[QuarantineEntry] = []
        self._loaded_mtime_ns: int | None = None
        self._next_refresh = 0.0
        self._logged: set[tuple[int, str]] = set()

    # -- loading ----------------------------------------------------------------------------

    def load(self) -> Quarantine:
        """Read every report in the directory (a damaged one is logged and skipped: its
        range is still in the log, and the next scan that meets it reports it again)."""
        with self._lock:
            self._load_locked()
        return self

    def _load_locked(self) -> None:
        try:
            mtime = self.directory.stat().st_mtime_ns
            paths = sorted(self.directory.glob("*.json"))
        except FileNotFoundError:
            return
        corrupt: dict[int, QuarantineEntry] = {e.offset: e for e in self.ranges}
        tails: dict[str, QuarantineEntry] = {e.name: e for e in self._tails}
        for path in paths:
            try:
                entry = QuarantineEntry.from_dict(json.loads(path.read_text("utf-8")))
            except (OSError, ValueError, TypeError, KeyError) as exc:
                log.error("%s: unreadable quarantine report (%s); skipped", path, exc)
                continue
            if entry.kind == "corrupt":
                corrupt.setdefault(entry.offset, entry)
            else:
                tails.setdefault(entry.name, entry)
        self._publish(corrupt.values())
        self._tails = sorted(tails.values(), key=lambda e: (e.offset, e.found_ms))
        self._loaded_mtime_ns = mtime

    def _publish(self, entries: Any) -> None:
        ordered = sorted(entries, key=lambda e: e.offset)
        self.ranges = tuple(ordered)
        self._starts = tuple(e.offset for e in ordered)

    def refresh(self) -> None:
        """Pick up ranges another process quarantined, at most once per
        ``REFRESH_INTERVAL_S`` (one stat of the directory)."""
        now = time.monotonic()
        if now < self._next_refresh:
            return
        self._next_refresh = now + REFRESH_INTERVAL_S
        try:
            mtime = self.directory.stat().st_mtime_ns
        except FileNotFoundError:
            return
        if mtime != self._loaded_mtime_ns:
            with self._lock:
                self._load_locked()

    def entries(self) -> list[QuarantineEntry]:
        """Every entry, corrupt ranges and cut tails, by offset then time."""
        return sorted([*self.ranges, *self._tails], key=lambda e: (e.offset, e.found_ms))

    # -- lookups (readers, reput) -----------------------------------------------------------

    def covering(self, offset: int, size: int = 1) -> QuarantineEntry | None:
        """The corrupt range that overlaps ``[offset, offset + size)``, if any."""
        starts = self._starts
        if not starts:
            return None
        ranges = self.ranges
        i = bisect.bisect_right(starts, offset + size - 1) - 1
        if i >= 0 and ranges[i].end > offset and ranges[i].offset < offset + size:
            return ranges[i]
        return None

    def next_start(self, offset: int) -> int | None:
        """The first corrupt range starting at or after ``offset``."""
        starts = self._starts
        i = bisect.bisect_left(starts, offset)
        return starts[i] if i < len(starts) else None

    def log_skip(self, entry: QuarantineEntry, who: str, what: str) -> None:
        """Log (at ERROR once per range and reader, then at DEBUG) that ``who`` skipped
        ``what`` because it lies in ``entry``."""
        key = (entry.offset, who)
        first = key not in self._logged
        if first and len(self._logged) < _LOGGED_MAX:
            self._logged.add(key)
        log.log(
            logging.ERROR if first else logging.DEBUG,
            "%s skips %s: CommitLog %d..%d is quarantined (%s; %s)",
            who, what, entry.offset, entry.end, entry.reason, self.directory / f"{entry.name}.json",
        )  # fmt: skip

    def next_queue_offsets(self, table: dict[tuple[str, int], int]) -> int:
        """Raise ``table`` (``(topic, queue_id)`` -> next queue offset) past every queue
        offset a quarantined record's header still shows, so that no new message gets an
        offset a lost one had. A header offset counts only if it is at most the table's
        value plus the number of such headers of that queue (a flipped QUEUEOFFSET must not
        open a huge gap). Returns how many entries were raised."""
        headers: dict[tuple[str, int], list[int]] = {}
        for entry in self.ranges:
            for r in entry.records:
                if r.topic is not None:
                    headers.setdefault((r.topic, r.queue_id), []).append(r.queue_offset)
        raised = 0
        for key, offsets in headers.items():
            current = table.get(key, 0)
            plausible = [o for o in offsets if o < current + len(offsets)]
            if len(plausible) < len(offsets):
                implausible = sorted(set(offsets) - set(plausible))
                log.warning(
                    "%s-%d: quarantined headers show queue offsets %s, implausible next to "
                    "%d; not reserved", key[0], key[1], implausible, current,
                )  # fmt: skip
            top = max(plausible, default=-1) + 1
            if top > current:
                table[key] = top
                raised += 1
        return raised

    # -- quarantining -----------------------------------------------------------------------

    def quarantine(
        self,
        source: SegmentFile,
        base_offset: int,
        position: int,
        end_position: int,
        *,
        reason: str,
        found_by: FoundBy,
        kind: Kind = "corrupt",
        report_problem: bool = True,
    ) -> QuarantineEntry:
        """Quarantine ``[position, end_position)`` of the segment file ``source`` (whose
        first byte is CommitLog offset ``base_offset``): copy, report, add to the table,
        report the health problem (``report_problem``) and log. A corrupt range already
        known at (or around) that offset is returned as it is; a new one ends where a known
        one starts.

        Raises:
            OSError: a torn tail's copy or report cannot be written (the caller must then
                not cut it). A corrupt range is kept in memory instead, with an error logged.
        """
        offset = base_offset + position
        with self._lock:
            if kind == "corrupt":
                known = self._known_locked(offset)
                if known is None:
                    known = self.covering(offset)
                if known is not None:
                    return known
                # Ranges never overlap: a range met again from an earlier start ends this one.
                following = self.next_start(offset)
                if following is not None and following < base_offset + end_position:
                    end_position = following - base_offset
            copied_end = source.nonzero_end(position, end_position)
            data = source.read(position, copied_end - position)
            found_ms = self.clock.now_ms()
            name = f"{offset:020d}" if kind == "corrupt" else f"tail-{offset:020d}-{found_ms}"
            entry = QuarantineEntry(
                name=name,
                kind=kind,
                offset=offset,
                length=end_position - position,
                segment=f"commitlog/{source.path.name}",
                position=position,
                copied_bytes=len(data),
                reason=reason,
                found_ms=found_ms,
                found_by=found_by,
                records=tuple(_records_in(data, offset)),
            )
            if not self.readonly:
                try:
                    self._write(entry, data)
                except OSError as exc:
                    if kind != "corrupt":
                        raise
                    # The bytes stay in the log: skip them in this process all the same.
                    log.error(
                        "could not write the quarantine copy of CommitLog %d..%d (%s); the "
                        "range is skipped in memory only and quarantined again at the next "
                        "start", offset, entry.end, exc,
                    )  # fmt: skip
            if kind == "corrupt":
                self._publish([*self.ranges, entry])
            else:
                self._tails.append(entry)
        self._announce(entry, report_problem)
        return entry

    def _known_locked(self, offset: int) -> QuarantineEntry | None:
        if offset not in self._starts:
            self._load_locked()  # another process may have written it
        i = bisect.bisect_left(self._starts, offset)
        if i < len(self._starts) and self._starts[i] == offset:
            return self.ranges[i]
        return None

    def _write(self, entry: QuarantineEntry, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if data:
            _write_atomic(self.directory / f"{entry.name}.bin", data)
        report = json.dumps(entry.as_dict(), indent=1, sort_keys=True).encode()
        _write_atomic(self.directory / f"{entry.name}.json", report)
        fsync_directory(self.directory)
        self._loaded_mtime_ns = self.directory.stat().st_mtime_ns

    def _announce(self, entry: QuarantineEntry, report_problem: bool) -> None:
        copy = self.directory / f"{entry.name}.bin"
        where = f"{entry.segment} at {entry.position}"
        lost = f"; messages there: {entry.describe_records()}" if entry.records else ""
        if entry.kind == "corrupt":
            summary = (
                f"CommitLog {entry.offset}..{entry.end} ({entry.length} bytes, {where}) is "
                f"corrupt ({entry.reason}); quarantined and skipped, every other record kept"
                f"{lost}"
            )
            log.error(
                "%s; found by %s; copy in %s", summary, entry.found_by,
                copy if entry.copied_bytes else "(all zeros: nothing to copy)",
            )  # fmt: skip
        else:
            summary = (
                f"torn tail of {entry.length} bytes cut from the CommitLog at {entry.offset} "
                f"({where}: {entry.reason}); its {entry.copied_bytes} non-zero bytes are kept in "
                f"{copy}{lost}"
            )
            log.warning("%s", summary)
        if report_problem and self.health is not None and not self.readonly:
            detail = entry.as_dict() | {
                "copy": str(copy) if entry.copied_bytes else None,
                "report": str(self.directory / f"{entry.name}.json"),
            }
            try:
                self.health.report(PROBLEM_KIND, entry.problem_id, summary, detail)
            except OSError as exc:
                log.error("could not record the health problem %s (%s)", entry.problem_id, exc)


def _records_in(data: bytes, offset: int) -> list[LostRecord]:
    """Headers inside ``data`` (CommitLog bytes from ``offset``) that still read: a magic
    code (or the start of the range, whose magic may be what was damaged) with the
    PHYSICALOFFSET field equal to its own position. The topic is read when its length
    fields fit in ``data`` and it is a valid topic name."""
    found: list[LostRecord] = []
    first = _header_at(data, 0, offset)  # the range's first record, whatever its magic says
    if first is not None and data[4:8] not in _MAGICS:
        found.append(first)
    for magic in _MAGICS:
        i = data.find(magic)
        while i >= 0:
            record = _header_at(data, i - 4, offset)
            if record is not None:
                found.append(record)
            i = data.find(magic, i + 1)
    return sorted(found, key=lambda r: r.offset)


def record_header(data: bytes, offset: int) -> LostRecord | None:
    """The header of the record at the start of ``data`` (CommitLog bytes from ``offset``),
    if its PHYSICALOFFSET field is ``offset`` and it takes a queue offset (topic None when
    the topic does not read as a valid name)."""
    return _header_at(data, 0, offset)


def _header_at(data: bytes, pos: int, offset: int) -> LostRecord | None:
    if pos < 0 or pos + HEADER_SIZES[0] > len(data):
        return None
    (phys,) = INT64.unpack_from(data, pos + PHYS_OFFSET_POSITION)
    (sys_flag,) = INT32.unpack_from(data, pos + SYSFLAG_POSITION)
    if phys != offset + pos or sys_flag & TRANSACTION_TYPE_MASK not in (
        TRANSACTION_NOT_TYPE,
        TRANSACTION_COMMIT_TYPE,
    ):
        return None
    (queue_id,) = INT32.unpack_from(data, pos + QUEUE_ID_POSITION)
    (queue_offset,) = INT64.unpack_from(data, pos + QUEUE_OFFSET_POSITION)
    if queue_id < 0 or queue_offset < 0:
        return None
    return LostRecord(offset + pos, _topic_at(data, pos, sys_flag), queue_id, queue_offset)


def _topic_at(data: bytes, pos: int, sys_flag: int) -> str | None:
    header = HEADER_SIZES[(sys_flag >> 4) & 3]
    if pos + header > len(data):
        return None
    (body_length,) = INT32.unpack_from(data, pos + header - INT32.size)
    at = pos + header + body_length
    v2 = data[pos + 4 : pos + 8] == _MAGICS[1]
    width = (TOPIC_LENGTH_V2 if v2 else TOPIC_LENGTH_V1).size
    if body_length < 0 or at + width > len(data):
        return None
    length = int.from_bytes(data[at : at + width], "big", signed=True)
    if length <= 0 or at + width + length > len(data):
        return None
    try:
        topic = data[at + width : at + width + length].decode("utf-8")
        validate_topic(topic)
    except UnicodeDecodeError:
        return None
    except ValidationError as exc:
        if exc.rule != "max_length":  # a long topic is a V2 record's, not a damaged one
            return None
    return topic


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
