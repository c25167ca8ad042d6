"""The Spark index builder behind mqcore's hand-off seam (``mqcore.services.index_build``).

``workers.tasks.spark_index_builder`` imports this module at call time (only when the
``pipeline`` package is installed and the store is at least ``CAIRN_INDEX_SPARK_MIN_BYTES``)
and passes :func:`build_index_files` to ``index_build.step`` as its ``builder``. The first
step of a side build then hands the range ``[from_offset, to_offset)`` here:

1. :func:`pipeline.jobs.rebuild_index.run_rebuild_index` parses the CommitLog segments in
   parallel on Spark and lays the entries down with mqcore's own writers into a scratch
   directory beside the side build (``<root>/rebuild/spark``), stopping at ``to_offset``;
2. its IndexFiles are moved into ``request.index_dir`` (``<root>/rebuild/index``), where
   the side build continues from the returned offset and the reput holder swaps them in.
   The rebuilt ConsumeQueues in the scratch directory are discarded (the live ones are
   kept).

A range that does not start at the CommitLog's first segment (``--from-offset``, which
keeps older index files) is declined: the builder returns ``from_offset`` untouched and the
side build indexes it in process, as without Spark.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from mqcore.services.index_build import BuildRequest
from mqcore.store.config import StoreConfig
from mqcore.store.files.mapped_file import fsync_directory
from pipeline.jobs.rebuild_index import run_rebuild_index
from pipeline.segments import list_segments

__all__ = ["build_index_files"]

log = logging.getLogger(__name__)

SCRATCH = "spark"


def build_index_files(request: BuildRequest) -> int:
    """Index ``[request.from_offset, request.to_offset)`` into ``request.index_dir`` on Spark.

    Returns:
        The CommitLog offset indexed up to: ``to_offset`` (or the end of the last complete
        record, if lower), or ``from_offset`` when the range is declined (see the module).

    Raises:
        StoreLayoutError: ``request.store_root`` is not a store.
    """
    index_dir = Path(request.index_dir)
    segments = list_segments(request.store_root)
    if (
        not segments
        or request.from_offset > segments[0].base_offset
        or request.to_offset <= request.from_offset
        or (index_dir.exists() and any(index_dir.iterdir()))
    ):
        return request.from_offset
    config = StoreConfig(
        commitlog_file_size=request.commitlog_file_size,
        index_hash_slots=request.hash_slots,
        index_max_entries=request.max_entries,
    )
    scratch = index_dir.parent / SCRATCH
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        report = run_rebuild_index(
            request.store_root,
            scratch,
            config=config,
            end_offset=request.to_offset,
            progress=lambda line: log.info("%s", line),
        )
        index_dir.mkdir(parents=True, exist_ok=True)
        built = scratch / "index"
        for path in sorted(built.iterdir()) if built.is_dir() else []:
            os.replace(path, index_dir / path.name)
        fsync_directory(index_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    request.progress(report.end_offset)
    log.info(
        "spark index build of %s: %d records, %d keys in %d index files up to %d",
        request.store_root,
        report.records,
        report.index_keys,
        report.index_files,
        report.end_offset,
    )
    return report.end_offset
