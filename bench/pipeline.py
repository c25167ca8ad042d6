"""Benchmark of the Spark data pipeline: Data Source scan rows/s and archive messages/s.

Usage::

    .venv/bin/python bench/pipeline.py                    # 5,000,000 messages (~10 min)
    .venv/bin/python bench/pipeline.py --messages 500000 --keep /tmp/cairn-bench
    .venv/bin/python bench/pipeline.py --keep /tmp/cairn-bench --skip-archive   # scans only

Steps, each timed and printed:

1. Generate the store: CommitLog segments written in bulk with mqcore's own encoder
   (``mqcore.format.record.encode_record``, 1 GiB segments with blank records at their ends,
   as MessageStore lays them out), 100-byte bodies, TAGS, two KEYS and a UNIQ_KEY, 8 topics.
   ``--keep DIR`` reuses a store generated there before.
2. The ceiling: a plain Python loop decoding the same segments with
   ``mqcore.format.record.decode_record`` on one core (what a row-at-a-time reader costs).
3. The same segments through the pipeline's columnar decoder on one core, no Spark: every
   column, then only ``phys_offset`` (what a projected scan decodes).
4. ``spark.read.format("cairn").load(store)`` over ``local[*]``, ``--repeat`` times each
   (best and spread printed):

   * **full schema** ``count()``: every row crosses to the JVM with all 21 columns (Python
     Data Sources get no column pruning from Spark); the headline scan figure;
   * **projected** ``count()`` with ``.schema("phys_offset bigint")``: what a query that
     names its columns pays (``pipeline.datasource``: reading fewer columns);
   * an aggregation over topic, body and keys (full schema).

   Each Spark line also prints the CPU time per row of the JVM and of the Python workers
   (from /proc), which tells where the time goes independently of other load on the box.
5. ``run_archive`` into a fresh directory: messages/s, Parquet bytes written; then
   ``run_compact`` over the result (files merged per topic/date).

Figures are printed as they come; nothing here is asserted. The load average is printed at
the start and the end: on a shared machine the wall-clock figures move with it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mqcore.format.layout import BLANK  # noqa: E402
from mqcore.format.msgid import HostAddress, UniqKeyGenerator  # noqa: E402
from mqcore.format.properties import encode_properties  # noqa: E402
from mqcore.format.record import (  # noqa: E402
    BLANK_MAGIC_CODE,
    DispatchRequest,
    decode_dispatch,
    decode_record,
    encode_record,
)

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


def columnar_one_core(root: Path, columns: list[str] | None = None) -> tuple[int, float]:
    from pipeline.columnar import Bounds, decode_chunk
    from pipeline.segments import WalkState, iter_chunks, list_segments, plan_ranges

    rows = 0
    started = time.perf_counter()
    for rng in plan_ranges(list_segments(root), verify_crc="none"):
        state = WalkState()
        for chunk in iter_chunks(rng, state):
            batch, _ = decode_chunk(chunk, Bounds(), columns)
            rows += batch.num_rows
    return rows, time.perf_counter() - started


def process_cpu() -> tuple[float, float]:
    """CPU seconds used so far by this process's JVM child and by its other descendants (the
    Python workers), from /proc; (0, 0) where /proc is not there."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[tuple[int, str, float]]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return 0.0, 0.0
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat.split("(", 1)[1].rsplit(")", 1)[0]
        fields = stat.rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / tick
        children.setdefault(int(fields[1]), []).append((int(entry), name, cpu))
    jvm = workers = 0.0
    stack = [os.getpid()]
    while stack:
        for pid, name, cpu in children.get(stack.pop(), []):
            if name == "java":
                jvm += cpu
            else:
                workers += cpu
            stack.append(pid)
    return jvm, workers


def timed(label: str, rows_expected: int, action: Any, repeat: int) -> None:
    """Run ``action`` (returns a row count) ``repeat`` times; print each run and the best."""
    rates: list[float] = []
    for _ in range(repeat):
        jvm0, py0 = process_cpu()
        started = time.perf_counter()
        rows = action()
        took = time.perf_counter() - started
        jvm1, py1 = process_cpu()
        rates.append(rows / took)
        print(
            f"  {label}: {rows:,} rows in {took:.1f} s = {rows / took:,.0f} rows/s "
            f"(CPU per row: JVM {1e6 * (jvm1 - jvm0) / rows:.2f} us, Python workers "
            f"{1e6 * (py1 - py0) / rows:.2f} us)"
            + ("" if rows == rows_expected else f" (expected {rows_expected:,})")
        )
    print(
        f"{label}: best {max(rates):,.0f} rows/s of {repeat} "
        f"(spread {min(rates):,.0f}-{max(rates):,.0f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--keep", type=Path, default=None, help="reuse/keep the store here")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--ceiling-rows", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each Spark scan")
    parser.add_argument("--skip-archive", action="store_true", help="scans only")
    args = parser.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="cairn-bench-pipeline-"))
    store = work / "store"
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, {load()}")
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
        for label, columns in (("every column", None), ("phys_offset only", ["phys_offset"])):
            rows, took = columnar_one_core(store, columns)
            print(
                f"columnar decoder, no Spark (1 core), {label}: {rows:,} rows in {took:.1f} s "
                f"= {rows / took:,.0f} rows/s"
            )
        run_spark(store, work, args.master, rows, args.repeat, not args.skip_archive)
    finally:
        print(f"end: {load()}")
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


def load() -> str:
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "load average unknown"
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min)"


def run_spark(
    store: Path, work: Path, master: str | None, expected: int, repeat: int, archive: bool
) -> None:
    from pyspark.sql import functions as F

    from pipeline.jobs.archive import run_archive
    from pipeline.jobs.compact import run_compact
    from pipeline.session import get_session

    started = time.perf_counter()
    spark = get_session(master)
    print(f"spark session: {time.perf_counter() - started:.1f} s ({spark.sparkContext.master})")
    df = spark.read.format("cairn").option("verifyCrc", "none").load(str(store))
    narrow = (
        spark.read.format("cairn")
        .schema("phys_offset bigint")
        .option("verifyCrc", "none")
        .load(str(store))
    )
    narrow.count()  # warm the Python workers
    timed("scan, full schema, df.count()", expected, df.count, repeat)
    timed("scan, projected (phys_offset), df.count()", expected, narrow.count, repeat)

    def aggregate() -> int:
        out = df.groupBy("topic").agg(
            F.count("*").alias("n"),
            F.sum(F.length("body")).alias("body_bytes"),
            F.approx_count_distinct(F.element_at("keys", 2)).alias("customers"),
        )
        return sum(r["n"] for r in out.collect())

    timed("scan + aggregate (topic, body, keys), full schema", expected, aggregate, repeat)
    if not archive:
        return
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
    started = time.perf_counter()
    compacted = run_compact(archive_out, master=master, keep_replaced_s=0)
    took = time.perf_counter() - started
    print(
        f"compact: {compacted.merged_files} message files into {compacted.written_files} "
        f"({compacted.messages:,} messages) in {took:.1f} s"
    )


if __name__ == "__main__":
    main()
