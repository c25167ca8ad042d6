"""Archive compaction: merge the small Parquet files of each topic/date partition.

Every archive run writes one message file and one key file per (topic, day, Spark partition)
it saw, so a frequent incremental archive leaves many small files: slow to list and to read.
``run_compact(out_dir)`` merges, in each ``topic=/date=`` directory, consecutive runs of small
live files (each below ``small_bytes``, together at most ``target_bytes``) into one
``compact-<W>-<E>.parquet`` per tree, and regenerates the key rows so that they point at the
new message file.

Atomicity, per directory (the rule readers follow is in :mod:`pipeline.archive_layout`):

1. the merged message file is written under a temporary name and renamed: not yet committed,
   readers skip it (no key file);
2. the key file is written the same way; its rename is the commit: from then on readers see
   the compacted file and skip the files it replaces (same rows), never both, never neither;
3. replaced files are deleted once their replacement is ``keep_replaced_s`` old (a reader that
   listed the directory just before the commit can still open them meanwhile).

A crash leaves a readable archive: before step 2 the old files are live and the next run
deletes the uncommitted message file and redoes the merge; after it, the next run deletes the
replaced files. Runs hold the archive's lock, so they never overlap an archive run.

Each directory to compact is one Spark task (pyarrow reads and writes; only counts return).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.archive_layout import (
    TREES,
    ArchiveBusyError,
    ArchiveFile,
    compact_name,
    live_files,
    lock_archive,
    partition_files,
    read_watermark,
)
from pipeline.progress import Emit
from pipeline.schema import ARCHIVE_SCHEMA, KEY_INDEX_SCHEMA

__all__ = ["ArchiveBusyError", "CompactReport", "plan_groups", "run_compact"]

DEFAULT_SMALL_BYTES = 32 * 1024 * 1024
"""Message files below this are merged."""
DEFAULT_TARGET_BYTES = 256 * 1024 * 1024
"""A merged message file holds at most about this many bytes of input files."""
DEFAULT_KEEP_REPLACED_S = 600.0
_ROW_GROUP_ROWS = 65_536


@dataclass
class CompactReport:
    """What one run did."""

    archive_dir: str
    partitions: int = 0
    """Directories in which files were merged."""
    merged_files: int = 0
    """Message files replaced by a compacted one (key files not counted)."""
    written_files: int = 0
    messages: int = 0
    key_entries: int = 0
    deleted_files: int = 0
    """Replaced files and crash leftovers deleted (both trees)."""
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- planning (driver) --------------------------------------------------------------------------


def plan_groups(
    live: list[ArchiveFile], small_bytes: int, target_bytes: int
) -> list[list[ArchiveFile]]:
    """Runs of consecutive small live files to merge (each run has 2+ files).

    Files of one archive run share a range and are kept together: a compacted file replaces
    every file inside its range, so leaving one of them out would hide its rows.
    """
    units: list[list[ArchiveFile]] = []
    for f in live:  # sorted by range; live ranges are disjoint or equal
        if units and (units[-1][0].start, units[-1][0].end) == (f.start, f.end):
            units[-1].append(f)
        else:
            units.append([f])
    groups: list[list[ArchiveFile]] = []
    current: list[ArchiveFile] = []
    size = 0
    for unit in units:
        unit_size = sum(_size(f.path) for f in unit)
        small = all(_size(f.path) < small_bytes for f in unit)
        if not small or size + unit_size > target_bytes:
            if len(current) > 1:
                groups.append(current)
            current, size = [], 0
            if not small:
                continue
        current = current + unit
        size += unit_size
    if len(current) > 1:
        groups.append(current)
    return groups


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _clean(root: Path, keep_replaced_s: float, now: float) -> int:
    """Delete temporary files, uncommitted compacted message files, and replaced files whose
    replacement is older than ``keep_replaced_s``. Returns how many files were deleted."""
    watermark = read_watermark(root).phys_offset
    deleted = 0
    for directory in _partition_dirs(root, "messages"):
        key_dir = root / "keys" / directory.relative_to(root / "messages")
        files = partition_files(directory)
        live = {f.path for f in live_files(root, directory, watermark)}
        committed = [f for f in files if f.compacted and f.path in live]
        for f in files:
            if f.compacted and not (key_dir / f.name).exists():
                deleted += _unlink(f.path)  # a crash between the two renames: redo later
                continue
            if f.path in live or (not f.compacted and f.start >= watermark):
                continue  # live, or an archive run's uncommitted file (the archive's to clean)
            by = [c for c in committed if c.start <= f.start and f.end <= c.end]
            if by and all(now - _mtime(root / "keys", c, root) >= keep_replaced_s for c in by):
                deleted += _unlink(key_dir / f.name) + _unlink(f.path)
    for tree in TREES:
        base = root / tree
        if base.is_dir():
            for tmp in base.rglob(".tmp-compact-*"):
                deleted += _unlink(tmp)
    # Key files whose message file is gone (deleted above, or by an interrupted earlier pass).
    for directory in _partition_dirs(root, "keys"):
        message_dir = root / "messages" / directory.relative_to(root / "keys")
        for f in partition_files(directory):
            if not (message_dir / f.name).exists() and f.start < watermark:
                deleted += _unlink(f.path)
    return deleted


def _mtime(keys_root: Path, compacted: ArchiveFile, root: Path) -> float:
    relative = compacted.path.relative_to(root / "messages")
    try:
        return (keys_root / relative).stat().st_mtime
    except FileNotFoundError:
        return float("inf")


def _unlink(path: Path) -> int:
    try:
        path.unlink()
    except FileNotFoundError:
        return 0
    return 1


def _partition_dirs(root: Path, tree: str) -> list[Path]:
    base = root / tree
    if not base.is_dir():
        return []
    return [
        day
        for topic in sorted(p for p in base.iterdir() if p.is_dir())
        for day in sorted(p for p in topic.iterdir() if p.is_dir())
    ]


# --- merging one directory (executor) ------------------------------------------------------------


def compact_group(root: Path, plan: list[tuple[str, int, int]]) -> dict[str, Any]:
    """Merge the message files of ``plan`` (path, start, end; one directory, range order) into
    one, with its key file, and commit the result."""
    from pipeline.jobs.archive import key_rows

    files = [Path(p) for p, _, _ in plan]
    directory = files[0].parent
    relative_dir = directory.relative_to(root / "messages")
    name = compact_name(min(s for _, s, _ in plan), max(e for _, _, e in plan))
    relative = f"messages/{relative_dir.as_posix()}/{name}"
    table = pa.concat_tables([pq.read_table(p, schema=ARCHIVE_SCHEMA) for p in files]).sort_by(
        "phys_offset"
    )
    message_path = directory / name
    tmp = directory / f".tmp-{name}"
    pq.write_table(
        table, tmp, compression="zstd", compression_level=1, row_group_size=_ROW_GROUP_ROWS
    )
    os.replace(tmp, message_path)
    keys = (
        pa.concat_tables(
            [key_rows(batch, relative) for batch in table.to_batches()]
            or [KEY_INDEX_SCHEMA.empty_table()]
        )
        .sort_by([("key", "ascending"), ("phys_offset", "ascending")])
        .cast(KEY_INDEX_SCHEMA)
    )
    key_dir = root / "keys" / relative_dir
    key_dir.mkdir(parents=True, exist_ok=True)
    key_tmp = key_dir / f".tmp-{name}"
    pq.write_table(
        keys, key_tmp, compression="zstd", compression_level=1, row_group_size=_ROW_GROUP_ROWS
    )
    _fsync(key_tmp)
    os.replace(key_tmp, key_dir / name)  # the commit
    _fsync(key_dir)
    return {"messages": table.num_rows, "key_entries": keys.num_rows, "merged": len(files)}


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- driver ------------------------------------------------------------------------------------


def run_compact(
    out_dir: str | os.PathLike[str],
    *,
    master: str | None = None,
    spark: Any = None,
    small_bytes: int = DEFAULT_SMALL_BYTES,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    keep_replaced_s: float = DEFAULT_KEEP_REPLACED_S,
    progress: Emit | None = None,
) -> CompactReport:
    """Compact ``<out_dir>/archive`` (module docstring). Safe to run at any time, repeatedly.

    Args:
        out_dir: the pipeline's output directory (the archive is ``<out_dir>/archive``).
        master, spark: the Spark master or an existing session (as ``run_archive``).
        small_bytes: message files below this are merged.
        target_bytes: upper bound of the input bytes merged into one file.
        keep_replaced_s: replaced files are deleted once their replacement is this old (0:
            at the end of this run).
        progress: called with one line per step.

    Raises:
        ArchiveBusyError: an archive or compaction run holds the archive's lock.
    """
    started = time.monotonic()
    emit = progress or (lambda _line: None)
    root = Path(out_dir) / "archive"
    report = CompactReport(str(root))
    if not root.is_dir():
        emit(f"compact: no archive at {root}")
        return report
    with lock_archive(root):
        report.deleted_files += _clean(root, keep_replaced_s, time.time())
        watermark = read_watermark(root).phys_offset
        groups = [
            group
            for directory in _partition_dirs(root, "messages")
            for group in plan_groups(
                live_files(root, directory, watermark), small_bytes, target_bytes
            )
        ]
        emit(f"compact: {len(groups)} partitions to compact")
        if groups:
            _compact_groups(report, root, groups, spark or _session(master), emit)
        report.deleted_files += _clean(root, keep_replaced_s, time.time())
    report.seconds = round(time.monotonic() - started, 3)
    emit(
        f"compact: merged {report.merged_files} files into {report.written_files} in "
        f"{report.partitions} partitions ({report.messages} messages), deleted "
        f"{report.deleted_files} files, {report.seconds:.1f} s"
    )
    return report


def _session(master: str | None) -> Any:
    from pipeline.session import get_session

    return get_session(master)


def _compact_groups(
    report: CompactReport, root: Path, groups: list[list[ArchiveFile]], spark: Any, emit: Emit
) -> None:
    from pipeline.jobs.tasks import run_per_range

    plans = [[(str(f.path), f.start, f.end) for f in group] for group in groups]

    def task(i: int) -> dict[str, Any]:
        return compact_group(root, plans[i])

    results = run_per_range(spark, len(plans), task, label="compact", emit=emit)
    for group, result in zip(groups, results, strict=True):
        report.partitions += 1
        report.written_files += 1
        report.merged_files += result["merged"]
        report.messages += result["messages"]
        report.key_entries += result["key_entries"]
        where = group[0].path.parent.relative_to(root / "messages").as_posix()
        emit(f"compact: {where}: {result['merged']} files, {result['messages']} messages")
