"""Benchmark of the Spark data pipeline: Data Source scan rows/s and archive messages/s.

Usage::

    .venv/bin/python bench/pipeline.py                    # 5,000,000 messages
    .venv/bin/python bench/pipeline.py --messages 500000 --keep /tmp/cairn-bench

Steps, each timed and printed:

1. Generate the store: CommitLog segments written in bulk with mqcore's own encoder
   (``mqcore.store.format.encode_record``, 1 GiB segments with blank records at their ends,
   as MessageStore lays them out), 100-byte bodies, TAGS, two KEYS and a UNIQ_KEY, 8 topics.
2. The ceiling: a plain Python loop decoding the same segments with
   ``mqcore.store.format.decode_record`` on one core (what a row-at-a-time reader costs).
3. The same segments through the pipeline's columnar decoder on one core, no Spark.
4. ``spark.read.format("cairn").load(store)`` over ``local[*]``: ``count()`` and an
   aggregation touching every column family (sum of body lengths, distinct keys per topic).
5. ``run_archive`` into a fresh directory: messages/s, Parquet bytes written.

Figures are printed as they come; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mqcore.store.format import (  # noqa: E402
    BLANK_MAGIC_CODE,
    DispatchRequest,
    decode_dispatch,
    decode_record,
    encode_record,
)
from mqcore.store.msgid import HostAddress, UniqKeyGenerator  # noqa: E402
from mqcore.store.properties import encode_properties  # noqa: E402
from mqcore.store.record_layout import BLANK  # noqa: E402

SEGMENT_BYTES = 1024 * 1024 * 1024
TOPICS = [f"BenchTopic{i}" for i in range(8)]


def generate(root: Path, count: int, *, segment_bytes: int = SEGMENT_BYTES) -> int:
    """Write ``count`` records as CommitLog segments under ``root``. Returns bytes written."""
    directory = root / "commitlog"
    directory.mkdir(parents=True, exist_ok=True)
    uniq = UniqKeyGenerator(ip="10.1.2.3", pid=4242, loader_hash=0x1234)
    born = HostAddress("10.1.2.3", 50000)
    store = HostAddress("10.0.0.5", 10911)
    body = b"x" * 100
    queue_offsets: dict[tuple[str, int], int] = {}
    base, buf, pos, written = 0, bytearray(segment_bytes), 0, 0
    start_ms = 1_700_000_000_000
    for i in range(count):
        topic = TOPICS[i % len(TOPICS)]
        queue_id = i % 4
        qkey = (topic, queue_id)
        queue_offset = queue_offsets.get(qkey, 0)
        props = encode_properties(
            {
                "TAGS": f"tag{i % 16}",
                "KEYS": f"order-{i} customer-{i % 50_000}",
                "UNIQ_KEY": uniq.next_id(),
                "WAIT": "true",
            }
        )
        fields = dict(
            topic=topic,
            queue_id=queue_id,
            flag=0,
            queue_offset=queue_offset,
            sys_flag=0,
            born_timestamp=start_ms + i // 10,
            born_host=born,
            store_timestamp=start_ms + i // 10,
            store_host=store,
            reconsume_times=0,
            prepared_transaction_offset=0,
            body=body,
            properties=props,
        )
        record = encode_record(phys_offset=base + pos, **fields)
        if len(record) + BLANK.size > segment_bytes - pos:
            BLANK.pack_into(buf, pos, segment_bytes - pos, BLANK_MAGIC_CODE)
            (directory / f"{base:020d}").write_bytes(buf)
            written += pos
            base, buf, pos = base + segment_bytes, bytearray(segment_bytes), 0
            record = encode_record(phys_offset=base, **fields)
        buf[pos : pos + len(record)] = record
        pos += len(record)
        queue_offsets[qkey] = queue_offset + 1
    (directory / f"{base:020d}").write_bytes(buf)
    return written + pos


def python_ceiling(root: Path, limit_rows: int) -> tuple[int, float]:
    """decode_record over the segments, one core, at most ``limit_rows`` records."""
    rows = 0
    started = time.perf_counter()
    for path in sorted((root / "commitlog").iterdir()):
        data = path.read_bytes()
        pos = 0
        while rows < limit_rows:
            head = decode_dispatch(data, pos, len(data))
            if not isinstance(head, DispatchRequest):
                break
            decode_record(data, pos)
            pos += head.size
            rows += 1
    return rows, time.perf_counter() - started


def columnar_one_core(root: Path) -> tuple[int, float]:
    from pipeline.columnar import Bounds, decode_chunk
    from pipeline.segments import WalkState, iter_chunks, list_segments, plan_ranges

    rows = 0
    started = time.perf_counter()
    for rng in plan_ranges(list_segments(root), verify_crc="none"):
        state = WalkState()
        for chunk in iter_chunks(rng, state):
            batch, _ = decode_chunk(chunk, Bounds())
            rows += batch.num_rows
    return rows, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--keep", type=Path, default=None, help="reuse/keep the store here")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--ceiling-rows", type=int, default=500_000)
    args = parser.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="cairn-bench-pipeline-"))
    store = work / "store"
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    try:
        if not (store / "commitlog").is_dir():
            started = time.perf_counter()
            size = generate(store, args.messages)
            took = time.perf_counter() - started
            print(
                f"generate: {args.messages:,} messages, {size / 2**20:,.0f} MiB in {took:.1f} s "
                f"({args.messages / took:,.0f} msg/s, mqcore encode_record)"
            )
        rows, took = python_ceiling(store, args.ceiling_rows)
        print(f"ceiling, Python loop with mqcore decode_record (1 core): {rows / took:,.0f} rows/s")
        rows, took = columnar_one_core(store)
        print(
            f"columnar decoder, no Spark (1 core): {rows:,} rows in {took:.1f} s = {rows / took:,.0f} rows/s"
        )
        run_spark(store, work, args.master, args.messages)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


def run_spark(store: Path, work: Path, master: str | None, expected: int) -> None:
    from pyspark.sql import functions as F

    from pipeline.jobs.archive import run_archive
    from pipeline.session import get_session

    started = time.perf_counter()
    spark = get_session(master)
    print(f"spark session: {time.perf_counter() - started:.1f} s ({spark.sparkContext.master})")
    df = spark.read.format("cairn").option("verifyCrc", "none").load(str(store))
    df.count()  # warm the Python workers
    started = time.perf_counter()
    rows = df.count()
    took = time.perf_counter() - started
    print(f"scan, df.count(): {rows:,} rows in {took:.1f} s = {rows / took:,.0f} rows/s")
    started = time.perf_counter()
    out = df.groupBy("topic").agg(
        F.count("*").alias("n"),
        F.sum(F.length("body")).alias("body_bytes"),
        F.approx_count_distinct(F.element_at("keys", 2)).alias("customers"),
    )
    result = out.collect()
    took = time.perf_counter() - started
    print(
        f"scan + aggregate over every row (topic, body, keys): {rows / took:,.0f} rows/s "
        f"({len(result)} topics)"
    )
    archive_out = work / "archive-out"
    shutil.rmtree(archive_out, ignore_errors=True)
    started = time.perf_counter()
    report = run_archive(store, archive_out, master=master)
    took = time.perf_counter() - started
    print(
        f"archive: {report.messages:,} messages in {took:.1f} s = {report.messages / took:,.0f} "
        f"msg/s, {report.parquet_bytes / 2**20:,.0f} MiB Parquet, {report.files} files"
    )
    if report.messages != expected:
        print(f"  (expected {expected:,} messages)")


if __name__ == "__main__":
    main()
