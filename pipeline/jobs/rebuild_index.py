"""Index building on Spark: ConsumeQueue and IndexFile files rebuilt from the CommitLog.

Reput builds both while the broker runs, one record at a time. For a large store (recovery
after losing ``consumequeue/`` and ``index/``, a copied store, a changed index geometry)
that is hours of one core. Here:

1. **Spark tasks, one per segment, in parallel**: walk the segment exactly as reput does
   (``mqcore.format.record.decode_dispatch``: blank ends the segment, a corrupt record with a
   size is skipped, one without ends the walk) and produce, in CommitLog order,
   ConsumeQueue entries ``(topic, queue_id, queue_offset, phys_offset, size, tags_code)`` for
   NOT_TYPE/COMMIT records, and index entries ``(phys_offset, store_timestamp, key_hash)``
   for every key reput would index: UNIQ_KEY first, then each KEYS element, hashed with
   ``hashing.index_key_hash("topic#key")`` (the decode and the hashing are the costly part).
   Each task writes its entries to Arrow IPC files under ``<out>/.rebuild/``.
2. **The driver lays them down in CommitLog order with mqcore's own writers**:
   ``ConsumeQueue.put`` and ``IndexFile.put_key_hash`` (through ``IndexService``'s own
   file rolling), so the files are byte for byte what reput writes for the same CommitLog
   (``tests/pipeline`` compares them with a MessageStore's). IndexFile *names* are creation
   times, as in reput, so they differ from a store's; contents match.

The output is a store-shaped directory, ``<out>/consumequeue`` and ``<out>/index``, never the
live store: a broker has those files mapped. Swap them in with the broker stopped (or point
the Background Services' index task at it); an existing non-empty output is refused.
"""

from __future__ import annotations

import mmap
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from mqcore.format.delay_levels import parse_delay_levels
from mqcore.format.hashing import index_key_hash
from mqcore.format.layout import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from mqcore.format.record import Corrupt, DispatchRequest, decode_dispatch
from mqcore.store.config import StoreConfig
from mqcore.store.consume_queue_store import ConsumeQueueStore
from mqcore.store.index.index_service import IndexService
from pipeline.progress import Emit
from pipeline.segments import ScanRange, list_segments, plan_ranges, snapshot_end

__all__ = ["RebuildReport", "run_rebuild_index"]

_CQ_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("phys_offset", pa.int64()),
        ("size", pa.int32()),
        ("tags_code", pa.int64()),
    ]
)
# key_hash is null for a record with nothing to index: reput still calls build_index for it,
# which creates (or rolls) the index file, so the driver must see the call too.
_INDEX_SCHEMA = pa.schema(
    [("phys_offset", pa.int64()), ("store_timestamp", pa.int64()), ("key_hash", pa.int32())]
)
_FLUSH_ROWS = 200_000


@dataclass
class RebuildReport:
    store_dir: str
    out_dir: str
    end_offset: int
    segments: int = 0
    records: int = 0
    consume_queue_entries: int = 0
    index_keys: int = 0
    queues: int = 0
    index_files: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _HashIndexWriter(IndexService):
    """``IndexService.build_index`` for keys hashed on the executors.

    The same steps in the same order (newest file or a new one, the replay guard, one
    ``put_key_hash`` per key, rolling through ``_put_rolling``), minus the hashing. It uses
    IndexService's rolling helpers so file headers chain exactly as reput's do; a public
    ``build_index_hashes`` in mqcore would let this subclass go.
    """

    def put_hashes(self, phys_offset: int, store_timestamp: int, hashes: Sequence[int]) -> None:
        files = self._files
        f = files[-1] if files else None
        if f is None or f.is_full:
            f = self._writable_file()
        if phys_offset < f.end_phys_offset:
            return
        for key_hash in hashes:
            if not f.put_key_hash(key_hash, phys_offset, store_timestamp):
                f = self._put_rolling(key_hash, phys_offset, store_timestamp)


# --- executor side ------------------------------------------------------------------------------


class _Sink:
    """Buffers rows and streams them to an Arrow IPC file."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path, self.schema, self.rows, self.records = path, schema, 0, 0
        self._columns: list[list[Any]] = [[] for _ in schema]
        self._writer = ipc.new_file(str(path), schema)

    def add(self, *values: Any) -> None:
        for column, value in zip(self._columns, values, strict=True):
            column.append(value)
        self.rows += 1
        if len(self._columns[0]) >= _FLUSH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._columns[0]:
            self._writer.write_batch(pa.RecordBatch.from_arrays(
                [pa.array(c, f.type) for c, f in zip(self._columns, self.schema, strict=True)], schema=self.schema
            ))  # fmt: skip
            self._columns = [[] for _ in self.schema]

    def close(self) -> None:
        self._flush()
        self._writer.close()


def dispatch_range(
    index: int, rng: ScanRange, work: Path, end: int, delay_levels: str, index_enabled: bool
) -> dict[str, Any]:
    """Walk one segment as reput does and write its dispatch entries (runs in a Spark task)."""
    delays = parse_delay_levels(delay_levels)
    cq = _Sink(work / f"cq-{index:05d}.arrow", _CQ_SCHEMA)
    keys = _Sink(work / f"index-{index:05d}.arrow", _INDEX_SCHEMA)
    with open(rng.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        _walk_segment(
            data, rng, min(rng.file_size, end - rng.base_offset), delays, index_enabled, cq, keys
        )
    cq.close()
    keys.close()
    return {"records": cq.records, "cq_entries": cq.rows, "index_rows": keys.rows}


def _walk_segment(
    data: mmap.mmap,
    rng: ScanRange,
    limit: int,
    delays: Sequence[int],
    index_enabled: bool,
    cq: _Sink,
    keys: _Sink,
) -> None:
    pos = rng.start - rng.base_offset
    keyless_run = False
    while pos < limit:
        r = decode_dispatch(data, pos, limit, delay_levels_ms=delays)
        if isinstance(r, DispatchRequest):
            cq.records += 1
            tx = r.sys_flag & 0xC
            if tx in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
                cq.add(r.topic, r.queue_id, r.queue_offset, r.phys_offset, r.size, r.tags_code)
            if index_enabled:
                hashes = _hashes(r) if tx != TRANSACTION_ROLLBACK_TYPE else []
                for h in hashes:
                    keys.add(r.phys_offset, r.store_timestamp, h)
                if not hashes and not keyless_run:  # one marker per run of keyless records
                    keys.add(r.phys_offset, r.store_timestamp, None)
                keyless_run = not hashes
            pos += r.size
        elif isinstance(r, Corrupt) and r.size > 0:
            pos += r.size  # reput skips a record whose TOTALSIZE still frames it
        else:
            break  # blank (end of segment), corrupt with nothing to skip, or the snapshot end


def _hashes(r: DispatchRequest) -> list[int]:
    out = [index_key_hash(f"{r.topic}#{r.uniq_key}")] if r.uniq_key is not None else []
    if r.keys:
        out.extend(index_key_hash(f"{r.topic}#{key}") for key in r.keys.split(" ") if key)
    return out


# --- driver side --------------------------------------------------------------------------------


def run_rebuild_index(
    store_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    config: StoreConfig | None = None,
    master: str | None = None,
    spark: Any = None,
    progress: Emit | None = None,
    end_offset: int | None = None,
) -> RebuildReport:
    """Rebuild ``consumequeue/`` and ``index/`` of ``store_dir`` into ``out_dir``.

    Args:
        store_dir: the store (read-only; its lock is not taken).
        out_dir: where the two directories are written; must not hold them already.
        config: the store's geometry (ConsumeQueue file entries, index slots and entries,
            delay levels, ``message_index_enable``); RocketMQ's defaults when omitted.
        master, spark, progress: as for :func:`pipeline.jobs.archive.run_archive`.
        end_offset: stop there (a record boundary, e.g. the store's confirm offset) rather
            than at the end of the last complete record now.

    Raises:
        StoreLayoutError: ``store_dir`` is not a store.
        FileExistsError: ``out_dir`` already holds ``consumequeue`` or ``index`` files.
    """
    started = time.monotonic()
    config = config or StoreConfig()
    emit = progress or (lambda _line: None)
    out = Path(out_dir)
    for name in ("consumequeue", "index"):
        if (out / name).exists() and any((out / name).iterdir()):
            raise FileExistsError(f"{out / name} is not empty; rebuild into a fresh directory")
    segments = list_segments(store_dir)
    end = snapshot_end(store_dir)
    if end_offset is not None:
        end = min(end, end_offset)
    ranges = plan_ranges(
        segments, end_offset=end, max_partition_bytes=max(s.size for s in segments) if segments else 1 << 30,
        verify_crc="none",
    )  # fmt: skip
    report = RebuildReport(str(store_dir), str(out), end, segments=len(ranges))
    work = out / ".rebuild"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    emit(f"rebuild-index: CommitLog [0, {end}) in {len(ranges)} segments")
    try:
        if ranges:
            _dispatch(report, ranges, work, end, config, spark, master, emit)
        _lay_down(report, len(ranges), work, out, config, emit)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report.seconds = round(time.monotonic() - started, 3)
    emit(
        f"rebuild-index: {report.records} records: {report.consume_queue_entries} queue entries in "
        f"{report.queues} queues, {report.index_keys} keys in {report.index_files} index files, "
        f"{report.seconds:.1f} s"
    )
    return report


def _dispatch(
    report: RebuildReport, ranges: list[ScanRange], work: Path, end: int, config: StoreConfig,
    spark: Any, master: str | None, emit: Emit,
) -> None:  # fmt: skip
    from pipeline.jobs.tasks import run_per_range

    if spark is None:
        from pipeline.session import get_session

        spark = get_session(master)
    delays, enabled = config.message_delay_level, config.message_index_enable

    def task(i: int) -> dict[str, Any]:
        return dispatch_range(i, ranges[i], work, end, delays, enabled)

    for rng, result in zip(
        ranges,
        run_per_range(spark, len(ranges), task, label="rebuild-index", emit=emit),
        strict=True,
    ):
        report.records += result["records"]
        emit(
            f"rebuild-index: segment {rng.name}: {result['records']} records, {result['cq_entries']} queue entries"
        )


def _lay_down(
    report: RebuildReport, count: int, work: Path, out: Path, config: StoreConfig, emit: Emit
) -> None:
    """Write the entries, partition by partition in CommitLog order, with mqcore's writers."""
    queues = ConsumeQueueStore(out, file_size_bytes=config.consume_queue_file_size)
    index = _HashIndexWriter(out, config.index_hash_slots, config.index_max_entries)
    index.load(True, 0)
    try:
        for i in range(count):
            for batch in ipc.open_file(str(work / f"cq-{i:05d}.arrow")).read_all().to_batches():
                for topic, queue_id, queue_offset, phys, size, tags in zip(
                    *(c.to_pylist() for c in batch.columns), strict=True
                ):
                    queues.find_or_create(topic, queue_id).put(phys, size, tags, queue_offset)
                    report.consume_queue_entries += 1
            table = ipc.open_file(str(work / f"index-{i:05d}.arrow")).read_all()
            _put_index(index, table, report)
        report.queues = sum(len(queues.queues(t)) for t in queues.topics())
        report.index_files = len(index.files)
        emit(
            f"rebuild-index: laid down {report.consume_queue_entries} queue entries, {report.index_keys} keys"
        )
    finally:
        queues.flush_all(0)
        queues.close()
        index.flush()
        index.close()


def _put_index(index: _HashIndexWriter, table: pa.Table, report: RebuildReport) -> None:
    phys_list = table.column("phys_offset").to_pylist()
    times = table.column("store_timestamp").to_pylist()
    hashes = table.column("key_hash").to_pylist()
    i, n = 0, len(phys_list)
    while i < n:
        j = i
        group: list[int] = []
        while j < n and phys_list[j] == phys_list[i]:
            if hashes[j] is not None:
                group.append(hashes[j])
            j += 1
        index.put_hashes(phys_list[i], times[i], group)
        report.index_keys += len(group)
        i = j
