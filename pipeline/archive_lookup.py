"""Key lookup in the archive, with pyarrow only: no Spark, no JVM, cheap enough for a request.

The REST key query and the console call :func:`lookup` for time ranges older than the
CommitLog's oldest message, where ``MessageStore.query_by_key`` finds nothing because cleanup
deleted the segments. Cost: the key files of one topic for the UTC days in the range (their
row groups are sorted by key, so Parquet statistics skip most of each file), then the rows of
the matching messages from their message files (row groups sorted by phys_offset).

Only live files are read (:mod:`pipeline.archive_layout`), so a lookup running beside an
archive or compaction run never sees half of it. A compaction that deletes replaced files
between the listing and the read makes the lookup list again (``_ATTEMPTS``).
"""

from __future__ import annotations

import os
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from pipeline.archive_layout import archive_root, escape_partition_value, live_files, read_watermark

__all__ = ["lookup"]

_DAY_MS = 86_400_000
_ATTEMPTS = 3


def _day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).date().isoformat()


def _key_files(root: Path, topic: str, begin_ms: int, end_ms: int, committed: int) -> list[Path]:
    topic_dir = root / "keys" / f"topic={escape_partition_value(topic)}"
    if not topic_dir.is_dir():
        return []
    first, last = _day(max(begin_ms, -62135596800000)), _day(min(end_ms, 253402300799999))
    files: list[Path] = []
    for day_dir in sorted(topic_dir.iterdir()):
        day = day_dir.name.removeprefix("date=")
        if not (day_dir.is_dir() and _is_date(day) and first <= day <= last):
            continue
        files.extend(f.path for f in live_files(root, day_dir, committed))
    return files


def _is_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def lookup(
    archive_dir: str | os.PathLike[str],
    topic: str,
    key: str,
    begin_ms: int,
    end_ms: int,
    limit: int = 32,
) -> list[dict[str, Any]]:
    """Archived messages of ``topic`` whose KEYS hold ``key`` (or whose UNIQ_KEY is ``key``),
    stored in ``[begin_ms, end_ms]``, oldest first: the store's ``query_by_key`` contract.

    Args:
        archive_dir: the archive root (``<out>/archive``) or the pipeline's ``<out>``.
        topic, key: exact match, as the store's IndexFile query re-checks them.
        begin_ms, end_ms: inclusive store-time range (epoch ms).
        limit: at most this many messages (the oldest).

    Returns:
        One dict per message with the columns of :data:`pipeline.schema.ARROW_SCHEMA`
        (``properties`` as a dict, ``keys`` as a list, ``body`` as bytes), plus
        ``archived: True`` and ``archive_file`` (relative to the archive root). An archive
        that does not exist yet gives [].

    Raises:
        ValueError: an empty key, ``begin_ms > end_ms`` or ``limit < 1``.
    """
    if not key:
        raise ValueError("key: must not be empty")
    if begin_ms > end_ms:
        raise ValueError("begin: must not be after end")
    if limit < 1:
        raise ValueError("limit: must be at least 1")
    root = archive_root(archive_dir)
    for attempt in range(_ATTEMPTS):
        try:
            return _lookup(root, topic, key, begin_ms, end_ms, limit)
        except FileNotFoundError:  # a compaction replaced a file after we listed it
            if attempt == _ATTEMPTS - 1:
                raise
    return []


def _lookup(
    root: Path, topic: str, key: str, begin_ms: int, end_ms: int, limit: int
) -> list[dict[str, Any]]:
    committed = read_watermark(root).phys_offset
    key_files = _key_files(root, topic, begin_ms, end_ms, committed)
    if not key_files:
        return []
    wanted = (
        (pc.field("key") == key)
        & (pc.field("store_timestamp") >= begin_ms)
        & (pc.field("store_timestamp") <= end_ms)
    )
    hits = ds.dataset([str(p) for p in key_files], format="parquet").to_table(
        columns=["phys_offset", "file"], filter=wanted
    )
    by_file: dict[str, set[int]] = {}
    for phys, file in zip(
        hits.column("phys_offset").to_pylist(), hits.column("file").to_pylist(), strict=True
    ):
        by_file.setdefault(file, set()).add(phys)
    rows: list[dict[str, Any]] = []
    for file, offsets in by_file.items():
        table = pq.read_table(root / file, filters=[("phys_offset", "in", sorted(offsets))])
        for row in table.to_pylist():
            row["topic"] = topic
            row["properties"] = dict(row["properties"])
            row["archived"] = True
            row["archive_file"] = file
            rows.append(row)
    rows.sort(key=lambda r: (r["store_timestamp"], r["phys_offset"]))
    return rows[:limit]
