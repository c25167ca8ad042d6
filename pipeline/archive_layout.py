"""The archive directory: paths, file names, the watermark and the writer lock.

Layout under ``<out>/archive`` (the *archive root*)::

    _watermark.json                           the commit point (below)
    _lock                                     flock'ed by the running archive job
    messages/topic=<t>/date=<yyyy-mm-dd>/part-<W>-<E>-<n>.parquet   archived rows
    keys/topic=<t>/date=<yyyy-mm-dd>/part-<W>-<E>-<n>.parquet       key index rows

``<t>`` is the topic escaped as Spark escapes partition values (``%XX`` for ``%``, ``/``,
``=``, ...), so ``spark.read.parquet("<root>/messages")`` sees ``topic`` and ``date``
columns. Dates are UTC days of ``store_timestamp``. ``W`` and ``E`` (20 digits) are the
CommitLog range ``[W, E)`` of the run that wrote the file and ``n`` its Spark partition.

**Commit rule.** ``_watermark.json`` holds ``phys_offset``: every message below it is archived,
and exactly once. A file is *committed* iff its ``W`` is below the watermark. A run starting at
watermark ``W`` first deletes every file named with a start ``>= W`` (left by a run that died
before its commit), writes its files (each to a temporary name, then renamed), and only then
replaces the watermark with ``E`` (write, fsync, rename, fsync the directory). Readers ignore
uncommitted files, so a crash at any point loses nothing and duplicates nothing.

**Compaction** (:mod:`pipeline.jobs.compact`) merges the small committed files of one
``topic=/date=`` directory into ``compact-<W>-<E>.parquet``, ``[W, E)`` being the union of
the merged files' ranges, in both trees. Its commit point is the rename of the *key* file: a
compacted file is committed iff ``keys/.../compact-<W>-<E>.parquet`` exists. A committed
compacted file *replaces* every other file of its directory whose range lies inside
``[W, E)``; readers skip replaced files (they hold the same rows), so a directory shows either
the old files or the compacted one, never both and never neither. Replaced files are deleted
later; a compacted message file without its key file is a crash's leftover, deleted by the next
compaction, which redoes the merge.

Readers list files with :func:`live_files` (one directory) or :func:`archive_files` (a tree),
e.g. Spark: ``spark.read.option("basePath", f"{root}/messages").parquet(*archive_files(root))``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ArchiveBusyError",
    "ArchiveFile",
    "Watermark",
    "archive_files",
    "archive_root",
    "compact_name",
    "escape_partition_value",
    "file_name",
    "file_start",
    "live_files",
    "lock_archive",
    "read_watermark",
    "write_watermark",
]

WATERMARK_FILE = "_watermark.json"
LOCK_FILE = "_lock"
_PART = re.compile(r"part-(\d{20})-(\d{20})-(\d{5})\.parquet")
_COMPACT = re.compile(r"compact-(\d{20})-(\d{20})\.parquet")
TREES = ("messages", "keys")
# Characters Spark's ExternalCatalogUtils.escapePathName escapes in partition values.
_ESCAPED = set("\"#%'*/:=?\\\x7f{[]^") | {chr(c) for c in range(0x20)}


class ArchiveBusyError(RuntimeError):
    """Another archive run holds the archive's lock."""


@dataclass(frozen=True, slots=True)
class Watermark:
    """Everything below ``phys_offset`` is archived; ``messages`` counts them over all runs."""

    phys_offset: int = 0
    messages: int = 0
    runs: int = 0
    store: str = ""
    updated_ms: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "phys_offset": self.phys_offset,
            "messages": self.messages,
            "runs": self.runs,
            "store": self.store,
            "updated_ms": self.updated_ms,
        }


def archive_root(path: str | os.PathLike[str]) -> Path:
    """The archive root for ``path``: ``path`` itself, or ``path/archive`` when that exists."""
    path = Path(path)
    if not (path / WATERMARK_FILE).exists() and (path / "archive").is_dir():
        return path / "archive"
    return path


def escape_partition_value(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def file_name(start: int, end: int, partition: int) -> str:
    return f"part-{start:020d}-{end:020d}-{partition:05d}.parquet"


def compact_name(start: int, end: int) -> str:
    return f"compact-{start:020d}-{end:020d}.parquet"


def file_start(name: str) -> int | None:
    """The run start ``W`` encoded in a part file name, or None for other names."""
    match = _PART.fullmatch(name)
    return int(match.group(1)) if match else None


def read_watermark(root: Path) -> Watermark:
    """The committed watermark (all zeros for a new archive).

    Raises:
        ValueError: the file exists but is not a watermark.
    """
    try:
        raw = json.loads((root / WATERMARK_FILE).read_text())
    except FileNotFoundError:
        return Watermark()
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{root / WATERMARK_FILE}: unreadable watermark ({exc})") from None
    return Watermark(
        phys_offset=int(raw["phys_offset"]),
        messages=int(raw.get("messages", 0)),
        runs=int(raw.get("runs", 0)),
        store=str(raw.get("store", "")),
        updated_ms=int(raw.get("updated_ms", 0)),
    )


def write_watermark(root: Path, watermark: Watermark) -> None:
    """Replace the watermark atomically (the archive's commit)."""
    tmp = root / f"{WATERMARK_FILE}.tmp"
    payload = dict(watermark.as_dict(), updated_ms=time.time_ns() // 1_000_000)
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / WATERMARK_FILE)
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class lock_archive:  # noqa: N801 (used as a context manager, like open)
    """Exclusive, non-blocking flock on ``<root>/_lock`` for the duration of a run.

    Raises:
        ArchiveBusyError: another run holds it.
    """

    def __init__(self, root: Path) -> None:
        self._path = root / LOCK_FILE
        self._fd = -1

    def __enter__(self) -> lock_archive:
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise ArchiveBusyError(f"{self._path}: another archive run is in progress") from None
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


def remove_uncommitted(root: Path, watermark: int) -> int:
    """Delete part files whose run start is at or above ``watermark``, and temporary files.

    Returns:
        How many files were deleted.
    """
    removed = 0
    for tree in ("messages", "keys"):
        base = root / tree
        if not base.is_dir():
            continue
        for path in base.rglob("*"):
            if not path.is_file():
                continue
            start = file_start(path.name)
            if path.name.startswith(".tmp-") or (start is not None and start >= watermark):
                path.unlink()
                removed += 1
    return removed


# --- which files a reader reads ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArchiveFile:
    """One Parquet file of a partition directory: its CommitLog range ``[start, end)``."""

    path: Path
    start: int
    end: int
    compacted: bool

    @property
    def name(self) -> str:
        return self.path.name


def _parse(path: Path) -> ArchiveFile | None:
    for pattern, compacted in ((_PART, False), (_COMPACT, True)):
        match = pattern.fullmatch(path.name)
        if match:
            return ArchiveFile(path, int(match.group(1)), int(match.group(2)), compacted)
    return None


def partition_files(directory: Path) -> list[ArchiveFile]:
    """Every archive file of one ``topic=/date=`` directory (committed or not), by range."""
    try:
        entries = list(directory.iterdir())
    except FileNotFoundError:
        return []
    found = [f for f in map(_parse, entries) if f is not None]
    return sorted(found, key=lambda f: (f.start, f.end, f.name))


def _key_twin(root: Path, file: ArchiveFile) -> Path:
    """The key file of a message file (same partition, same name), or ``file`` itself."""
    relative = file.path.relative_to(root)
    return (
        root / "keys" / Path(*relative.parts[1:]) if relative.parts[0] == "messages" else file.path
    )


def live_files(root: Path, directory: Path, watermark: int | None = None) -> list[ArchiveFile]:
    """The files a reader reads in one partition directory of either tree, by range.

    Committed part files (run start below the watermark) and committed compacted files,
    minus those a committed compacted file replaces (module docstring).
    """
    committed_below = read_watermark(root).phys_offset if watermark is None else watermark
    files = partition_files(directory)
    compacted = [
        f for f in files if f.compacted and f.end <= committed_below and _key_twin(root, f).exists()
    ]
    live: list[ArchiveFile] = []
    for f in files:
        if f.compacted and f not in compacted:
            continue
        if not f.compacted and f.start >= committed_below:
            continue
        if any(c != f and c.start <= f.start and f.end <= c.end for c in compacted):
            continue
        live.append(f)
    return live


def archive_files(root: Path, tree: str = "messages") -> list[str]:
    """Paths of every live file of ``tree`` (``messages`` or ``keys``), for a reader."""
    if tree not in TREES:
        raise ValueError(f"tree must be one of {TREES}, got {tree!r}")
    watermark = read_watermark(root).phys_offset
    base = root / tree
    if not base.is_dir():
        return []
    paths: list[str] = []
    for topic_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        for day_dir in sorted(p for p in topic_dir.iterdir() if p.is_dir()):
            paths.extend(str(f.path) for f in live_files(root, day_dir, watermark))
    return paths
