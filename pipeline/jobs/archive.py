"""Archive job: export new messages to Parquet by topic and date, with a key index.

``run_archive(store_dir, out_dir)`` is incremental: it archives the CommitLog range
``[W, E)`` where ``W`` is the committed watermark and ``E`` the end of the last complete record
now (``segments.snapshot_end``), then commits ``E``. The layout, the commit rule and why a
crash at any point neither loses nor duplicates rows are in :mod:`pipeline.archive_layout`.

What is archived: the messages a consumer can see, i.e. records whose transaction type is
NOT_TYPE or COMMIT (the ones reput puts in a ConsumeQueue); PREPARED and ROLLBACK records
are counted in ``records`` but not written. The key index holds one row per KEYS element and
per UNIQ_KEY, as the store's IndexFile does, pointing at the message's archive file.

Each Spark task reads one scan range and writes its own files with pyarrow (one message file
and one key file per topic and date it saw); only counts come back to the driver.

If cleanup deleted segments the archive had not reached yet (the archive ran too seldom),
the gap is reported in ``lost_bytes`` and a warning, and the run goes on from the oldest
segment: those messages are gone from the store and cannot be archived.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.archive_layout import (
    ArchiveBusyError,
    Watermark,
    escape_partition_value,
    file_name,
    lock_archive,
    read_watermark,
    remove_uncommitted,
    write_watermark,
)
from pipeline.columnar import Bounds
from pipeline.progress import Emit
from pipeline.scan import scan_range
from pipeline.schema import ARCHIVE_SCHEMA, KEY_INDEX_SCHEMA
from pipeline.segments import (
    DEFAULT_MAX_PARTITION_BYTES,
    ScanRange,
    WalkState,
    list_segments,
    plan_ranges,
    snapshot_end,
)

__all__ = ["ArchiveBusyError", "ArchiveReport", "key_rows", "run_archive"]

_VISIBLE_TYPES = pa.array([0x0, 0x8], pa.int32())  # NOT_TYPE, COMMIT (sys_flag & 0xC)
_ROW_GROUP_ROWS = 65_536
_EPOCH = date(1970, 1, 1)


@dataclass
class ArchiveReport:
    """What one run did. ``start_offset``/``end_offset``: the CommitLog range it covered."""

    store_dir: str
    archive_dir: str
    start_offset: int
    end_offset: int
    records: int = 0
    messages: int = 0
    key_entries: int = 0
    files: int = 0
    parquet_bytes: int = 0
    partitions: int = 0
    removed_uncommitted: int = 0
    lost_bytes: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- executor side ------------------------------------------------------------------------------


class _GroupWriter:
    """The message file and key file of one (topic, day) in one task."""

    def __init__(self, root: Path, topic: str, day: int, name: str) -> None:
        where = f"topic={escape_partition_value(topic)}/date={(_EPOCH + timedelta(days=day)).isoformat()}"
        self.relative = f"messages/{where}/{name}"
        self.message_path = root / self.relative
        self.key_path = root / "keys" / where / name
        self.message_path.parent.mkdir(parents=True, exist_ok=True)
        self.key_path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.message_path.with_name(f".tmp-{name}")
        self._writer = pq.ParquetWriter(
            self._tmp, ARCHIVE_SCHEMA, compression="zstd", compression_level=1
        )
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._keys: list[pa.Table] = []
        self.messages = 0

    def add(self, rows: pa.RecordBatch) -> None:
        self._pending.append(rows.drop_columns(["topic"]))
        self._pending_rows += rows.num_rows
        self.messages += rows.num_rows
        self._keys.append(key_rows(rows, self.relative))
        if self._pending_rows >= _ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._writer.write_table(pa.Table.from_batches(self._pending, ARCHIVE_SCHEMA))
            self._pending, self._pending_rows = [], 0

    def close(self) -> tuple[int, int]:
        """Finish both files under their final names. Returns (key rows, bytes written)."""
        self._flush()
        self._writer.close()
        os.replace(self._tmp, self.message_path)
        keys = pa.concat_tables(self._keys).sort_by(
            [("key", "ascending"), ("phys_offset", "ascending")]
        )
        tmp = self.key_path.with_name(f".tmp-{self.key_path.name}")
        pq.write_table(
            keys, tmp, compression="zstd", compression_level=1, row_group_size=_ROW_GROUP_ROWS
        )
        os.replace(tmp, self.key_path)
        return keys.num_rows, self.message_path.stat().st_size + self.key_path.stat().st_size


def key_rows(rows: pa.RecordBatch, relative: str) -> pa.Table:
    """One index row per KEYS element and per UNIQ_KEY of ``rows``."""
    keys = rows.column("keys")
    parents = pc.list_parent_indices(keys)
    uniq = pc.map_lookup(rows.column("properties"), "UNIQ_KEY", "last")
    has_uniq = pc.is_valid(uniq)
    uniq_rows = pc.indices_nonzero(has_uniq)
    which = pa.concat_arrays([parents.cast(pa.int64()), uniq_rows.cast(pa.int64())])
    key = pa.concat_arrays([keys.flatten(), pc.filter(uniq, has_uniq)])
    return pa.table(
        {
            "key": key,
            "store_timestamp": pc.take(rows.column("store_timestamp"), which),
            "msg_id": pc.take(rows.column("msg_id"), which),
            "phys_offset": pc.take(rows.column("phys_offset"), which),
            "file": pa.repeat(pa.scalar(relative, pa.string()), len(key)),
        },
        schema=KEY_INDEX_SCHEMA,
    )


def _groups(batch: pa.RecordBatch) -> Iterator[tuple[str, int, pa.RecordBatch]]:
    """Split ``batch`` into (topic, UTC day, rows) groups, rows kept in phys_offset order."""
    topics = pc.dictionary_encode(batch.column("topic"))
    days = batch.column("store_time").cast(pa.date32()).cast(pa.int32())
    day0 = pc.min(days).as_py()
    key = pc.add(
        pc.multiply(topics.indices.cast(pa.int64()), 1 << 32),
        pc.subtract(days, day0).cast(pa.int64()),
    )
    order = pc.sort_indices(key)  # stable: phys_offset order survives within a group
    sorted_key = pc.take(key, order)
    ends = pc.run_end_encode(sorted_key).run_ends.to_pylist()
    start = 0
    for end in ends:
        idx = order.slice(start, end - start)
        rows = batch.take(idx)
        first = sorted_key[start].as_py()
        yield topics.dictionary[first >> 32].as_py(), day0 + (first & 0xFFFFFFFF), rows
        start = end


def archive_range(index: int, rng: ScanRange, root: Path, start: int, end: int) -> dict[str, Any]:
    """Archive the visible messages of one scan range (runs in a Spark task)."""
    state = WalkState()
    writers: dict[tuple[str, int], _GroupWriter] = {}
    name = file_name(start, end, index)
    records = 0
    for batch in scan_range(rng, Bounds(min_phys=start, max_phys=end), state=state):
        records += batch.num_rows
        visible = pc.is_in(pc.bit_wise_and(batch.column("sys_flag"), 0xC), _VISIBLE_TYPES)
        rows = batch if visible.false_count == 0 else batch.filter(visible)
        if rows.num_rows == 0:
            continue
        for topic, day, group in _groups(rows):
            writer = writers.get((topic, day))
            if writer is None:
                writer = writers[(topic, day)] = _GroupWriter(root, topic, day, name)
            writer.add(group)
    key_entries = size = 0
    for writer in writers.values():
        keys, written = writer.close()
        key_entries += keys
        size += written
    return {
        "records": records,
        "messages": sum(w.messages for w in writers.values()),
        "key_entries": key_entries,
        "files": 2 * len(writers),
        "parquet_bytes": size,
        "next_offset": state.next_offset,
        "reason": state.reason,
        "detail": state.detail,
    }


# --- driver side --------------------------------------------------------------------------------


def run_archive(
    store_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    master: str | None = None,
    spark: Any = None,
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES,
    progress: Emit | None = None,
) -> ArchiveReport:
    """Archive what is new in ``store_dir`` into ``<out_dir>/archive``. Idempotent.

    Args:
        store_dir: the store (live or a copy); read-only, its lock is never taken.
        out_dir: the pipeline's output directory; the archive is ``<out_dir>/archive``.
        master: Spark master (see :mod:`pipeline.session`); ignored when ``spark`` is given.
        spark: an existing session to use.
        max_partition_bytes: scan-range size (segments above it are split).
        progress: called with one line per step/partition (the command prints them).

    Returns:
        An :class:`ArchiveReport`; ``messages == 0`` when nothing was new.

    Raises:
        StoreLayoutError: ``store_dir`` is not a store.
        ArchiveBusyError: another run is archiving into ``out_dir``.
    """
    started = time.monotonic()
    emit = progress or (lambda _line: None)
    root = Path(out_dir) / "archive"
    root.mkdir(parents=True, exist_ok=True)
    segments = list_segments(store_dir)
    with lock_archive(root):
        previous = read_watermark(root)
        start = previous.phys_offset
        report = ArchiveReport(str(store_dir), str(root), start, start)
        report.removed_uncommitted = remove_uncommitted(root, start)
        if report.removed_uncommitted:
            emit(f"archive: removed {report.removed_uncommitted} files of an unfinished run")
        if segments and start < segments[0].base_offset:
            report.lost_bytes = segments[0].base_offset - start
            report.warnings.append(
                f"CommitLog below {segments[0].base_offset} was cleaned up before it was "
                f"archived: {report.lost_bytes} bytes of messages are not in the archive"
            )
            start = segments[0].base_offset
        end = snapshot_end(store_dir, start)
        report.start_offset, report.end_offset = start, end
        ranges = plan_ranges(
            segments, start_offset=start, end_offset=end, max_partition_bytes=max_partition_bytes,
            verify_crc="none", start_is_record=True,
        )  # fmt: skip
        emit(f"archive: CommitLog [{start}, {end}) in {len(ranges)} partitions")
        if ranges:
            _archive_ranges(report, ranges, root, start, end, spark or _session(master), emit)
        if end != previous.phys_offset or report.lost_bytes:
            write_watermark(
                root,
                Watermark(
                    end, previous.messages + report.messages, previous.runs + 1, str(store_dir)
                ),
            )
    report.seconds = round(time.monotonic() - started, 3)
    for warning in report.warnings:
        emit(f"archive: warning: {warning}")
    emit(
        f"archive: {report.messages} messages ({report.records} records) into {report.files} "
        f"files, {report.parquet_bytes} bytes, watermark {end}, {report.seconds:.1f} s"
    )
    return report


def _session(master: str | None) -> Any:
    from pipeline.session import get_session

    return get_session(master)


def _archive_ranges(
    report: ArchiveReport,
    ranges: list[ScanRange],
    root: Path,
    start: int,
    end: int,
    spark: Any,
    emit: Emit,
) -> None:
    from pipeline.jobs.tasks import run_per_range

    def task(i: int) -> dict[str, Any]:
        return archive_range(i, ranges[i], root, start, end)

    results = run_per_range(spark, len(ranges), task, label="archive", emit=emit)
    report.partitions = len(ranges)
    for rng, result in zip(ranges, results, strict=True):
        for name in ("records", "messages", "key_entries", "files", "parquet_bytes"):
            setattr(report, name, getattr(report, name) + result[name])
        emit(
            f"archive: segment {rng.name}: {result['records']} records, {result['messages']} "
            f"archived, {result['files']} files ({result['reason']})"
        )
        if result["reason"] in ("corrupt", "crc", "gone"):
            report.warnings.append(
                f"segment {rng.name}: {result['reason']} {result['detail']}".strip()
            )
