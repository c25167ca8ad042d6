"""Engine benchmark: MessageStore put, dispatch (reput) and key query, against a ceiling.

Usage::

    .venv/bin/python bench/engine.py                 # 1,000,000 stored messages for the query
    .venv/bin/python bench/engine.py --quick         # ~15 s smoke run, smaller counts
    .venv/bin/python bench/engine.py --help

What is measured, in one process, on one core (the store's put path and reput are
single-threaded by design: one put lock, one reput runner):

* **ceiling**: a tight loop that writes the very records the batch put writes (same topic,
  body, pre-encoded properties) into a sparse file mapping with one ``struct.pack_into`` of
  the header, a masked ``zlib.crc32`` of the body and three slice copies. No validation, no
  property encoding, no ids, no results: the most any pure-Python writer can do per record
  on this machine, measured in the same run so the ratio is independent of the box.
* **put single / put batch**: ``MessageStore.put_message`` and ``put_batch`` with
  ``flush="async"`` (the put returns once the record is in the page cache; no flush service
  runs during the measurement). ``put_batch`` is the broker's batch put: a plain batch's
  results come back as columns (``BatchPutResults``), its offsetMsgIds made when first read.
  The **as PutResult objects** row puts the next messages of the same store with
  ``put_messages``, which returns a list of ``PutResult`` objects (every offsetMsgId made):
  what those objects cost. Each message carries ``TAGS`` (one of 8 tags), ``KEYS`` (one
  unique business key) and the ``UNIQ_KEY`` the store generates. Message objects are built
  outside the timed region (a producer builds them, not the broker).
* **reput**: ``dispatch_until_caught_up`` over everything put (ConsumeQueue + IndexFile).
* **pull**: ``get_messages`` reading the 100-byte queue front to back, 32 messages a call
  (no tag filter), each returned as a full ``MessageExt``; its own **pull ceiling** row, in
  the same run, copies each of the same records out of a read-only mapping of the CommitLog
  with one slice (positions and sizes read beforehand, untimed): the least a read of those
  bytes costs, with no ConsumeQueue read, no decoding and no message objects. The
  **get_records** row reads the same queue as raw record views (``get_records``, nothing
  decoded beyond the framing check).
* **query**: ``query_by_key`` for random business keys over the whole 100-byte store (at
  least 1,000,000 messages by default); each query must find exactly its one message.

MB/s counts CommitLog bytes (whole records: header, body, topic, properties). Segment sizes
are RocketMQ's defaults (1 GiB CommitLog, 300,000-unit ConsumeQueue, 420 MB IndexFile), all
sparse, in a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import gc
import mmap
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mqcore.format.layout import ENCODE_HEADERS, HEADER_SIZES, PROPERTIES_LENGTH
from mqcore.format.msgid import HostAddress, UniqKeyGenerator, encode_host
from mqcore.format.properties import encode_properties
from mqcore.format.record import MESSAGE_MAGIC_CODE
from mqcore.message import Message
from mqcore.store.config import StoreConfig
from mqcore.store.results import BatchPutResults, PutResult, PutStatus
from mqcore.store.store import MessageStore

TOPIC = "BenchTopic"
TAGS = ("TagA", "TagB", "TagC", "TagD", "TagE", "TagF", "TagG", "TagH")
BORN_HOST = HostAddress("10.1.2.3", 52100)
CHUNK = 10_000  # messages built per untimed step

TARGET_BATCH_RATIO = 0.50
OBJECTS_ROW_MAX = 100_000  # messages of the 'as PutResult objects' row
TARGET_REPUT_PER_S = 300_000
TARGET_QUERY_P99_MS = 1.0


@dataclass
class Row:
    name: str
    count: int
    seconds: float
    record_bytes: int
    ceiling_per_s: float | None = None

    @property
    def per_s(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.record_bytes / self.seconds / 1e6 if self.seconds else 0.0


def business_key(i: int) -> str:
    return f"ORDER-{i:010d}"


def make_messages(start: int, count: int, body: bytes, born_ms: int) -> list[Message]:
    return [
        Message(
            TOPIC,
            body,
            tags=TAGS[i & 7],
            keys=business_key(i),
            born_timestamp=born_ms,
            born_host=BORN_HOST,
        )
        for i in range(start, start + count)
    ]


# --- ceiling -------------------------------------------------------------------------------------


def ceiling(directory: Path, body: bytes, count: int, segment_bytes: int) -> Row:
    """Write ``count`` records shaped like the store's into fresh sparse mappings."""
    header = ENCODE_HEADERS[0]
    header_size = HEADER_SIZES[0]
    pack_into = header.pack_into
    crc32 = zlib.crc32
    topic = TOPIC.encode()
    topic_field = bytes((len(topic),)) + topic
    born = encode_host(BORN_HOST)
    store = encode_host(StoreConfig().store_host)
    uniq = UniqKeyGenerator(ip="10.1.2.3")
    # The records' properties, pre-encoded outside the loop (the engine must encode them).
    props = [
        encode_properties(
            {"TAGS": TAGS[i & 7], "KEYS": business_key(i), "UNIQ_KEY": uniq.next_id()}
        )
        for i in range(min(count, CHUNK))
    ]
    prop_fields = [PROPERTIES_LENGTH.pack(len(p)) + p for p in props]
    body_length = len(body)
    fixed = header_size + body_length + len(topic_field)
    born_ms = int(time.time() * 1000)
    written = 0
    seconds = 0.0
    file_index = 0
    queue_offset = 0
    while written < count:
        path = directory / f"ceiling-{file_index:04d}"
        file_index += 1
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(fd, segment_bytes)
        mm = mmap.mmap(fd, segment_bytes, access=mmap.ACCESS_WRITE)
        os.close(fd)
        pos = 0
        started = time.perf_counter()
        while written < count:
            prop_field = prop_fields[written % len(prop_fields)]
            total = fixed + len(prop_field)
            end = pos + total
            if end + 8 > segment_bytes:
                break
            pack_into(
                mm, pos,
                total, MESSAGE_MAGIC_CODE, crc32(body) & 0x7FFFFFFF, 0, 0,
                queue_offset, pos, 0, born_ms, born, born_ms, store, 0, 0, body_length,
            )  # fmt: skip
            body_pos = pos + header_size
            topic_pos = body_pos + body_length
            mm[body_pos:topic_pos] = body
            props_pos = topic_pos + len(topic_field)
            mm[topic_pos:props_pos] = topic_field
            mm[props_pos:end] = prop_field
            pos = end
            queue_offset += 1
            written += 1
        seconds += time.perf_counter() - started
        mm.close()
        path.unlink()
    average = fixed + sum(map(len, prop_fields)) / len(prop_fields)
    return Row(f"ceiling {len(body)} B", count, seconds, int(average * count))


# --- store phases --------------------------------------------------------------------------------


def checked_bytes(results: Sequence[PutResult]) -> int:
    """CommitLog bytes of one put's results, each checked PUT_OK (outside the timing).

    A plain batch's results are columns (``BatchPutResults``): read as such, as the broker
    reads them, rather than as a PutResult object per message made here."""
    if isinstance(results, BatchPutResults):
        assert results.status is PutStatus.PUT_OK, results.status
        return results.wrote_bytes
    assert all(r.ok for r in results), results
    return sum(r.wrote_bytes for r in results)


def timed_puts(
    store: MessageStore, body: bytes, start: int, count: int, batch: int, objects: bool = False
) -> tuple[float, int]:
    """Put ``count`` messages (one by one when ``batch`` is 1) with ``put_batch``, or with
    ``put_messages`` (a PutResult object per message) when ``objects``. Returns (seconds,
    bytes)."""
    born_ms = int(time.time() * 1000)
    seconds = 0.0
    record_bytes = 0
    done = 0
    put_message = store.put_message
    put_batch = store.put_messages if objects else store.put_batch
    while done < count:
        n = min(CHUNK, count - done)
        msgs = make_messages(start + done, n, body, born_ms)
        if batch == 1:
            t0 = time.perf_counter()
            results = [put_message(m) for m in msgs]
            seconds += time.perf_counter() - t0
            record_bytes += checked_bytes(results)
        else:
            groups = [msgs[i : i + batch] for i in range(0, n, batch)]
            t0 = time.perf_counter()
            batches = [put_batch(g) for g in groups]
            seconds += time.perf_counter() - t0
            record_bytes += sum(map(checked_bytes, batches))
        done += n
    return seconds, record_bytes


def pull_rows(store: MessageStore, count: int, batch: int) -> list[Row]:
    """Sequential ``get_messages`` of the first ``count`` messages of queue 0, and the
    slice-copy ceiling over the same records."""
    queue = store.queues.get(TOPIC, 0)
    assert queue is not None
    count = min(count, queue.max_offset)
    spans: list[tuple[int, int]] = []
    while len(spans) < count:
        spans += [(u.phys_offset, u.size) for u in queue.units(len(spans), count - len(spans))]
    segment = store.config.commitlog_file_size
    record_bytes = sum(size for _, size in spans)
    copied = 0
    seconds = 0.0
    first_file = spans[0][0] // segment
    for file_index in range(first_file, spans[-1][0] // segment + 1):
        path = store.root / "commitlog" / f"{file_index * segment:020d}"
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            base = file_index * segment
            mine = [(p - base, p - base + s) for p, s in spans if p // segment == file_index]
            t0 = time.perf_counter()
            for start, end in mine:
                copied += len(mm[start:end])
            seconds += time.perf_counter() - t0
    assert copied == record_bytes
    ceiling_row = Row("pull ceiling 100 B", count, seconds, record_bytes)
    get = store.get_messages
    offset = 0
    got = 0
    t0 = time.perf_counter()
    while offset < count:
        result = get("bench", TOPIC, 0, offset, min(batch, count - offset))
        got += len(result.messages)
        offset = result.next_offset
    seconds = time.perf_counter() - t0
    assert got == count, (got, count)
    pull_row = Row(f"pull({batch}) 100 B", count, seconds, record_bytes, ceiling_row.per_s)
    records = store.get_records
    offset = got = 0
    t0 = time.perf_counter()
    while offset < count:
        views = records(TOPIC, 0, offset, min(batch, count - offset))
        got += len(views.records)
        offset = views.next_offset
    seconds = time.perf_counter() - t0
    assert got == count, (got, count)
    views_row = Row(f"get_records({batch}) 100 B", count, seconds, record_bytes, ceiling_row.per_s)
    return [ceiling_row, pull_row, views_row]


@dataclass
class StoreRun:
    rows: list[Row]
    reput: Row
    query_ms: list[float]
    stored: int
    pull: list[Row]


def run_store(
    directory: Path,
    body: bytes,
    single: int,
    total: int,
    batch: int,
    queries: int,
    ceiling_row: Row,
    seed: int,
    pull: int = 0,
) -> StoreRun:
    """Single puts, then batch puts up to ``total``, then reput, then key queries."""
    label = f"{len(body)} B"
    with MessageStore(directory, StoreConfig(flush="async")) as store:
        gc.collect()
        seconds, nbytes = timed_puts(store, body, 0, single, 1)
        single_row = Row(f"put single {label}", single, seconds, nbytes, ceiling_row.per_s)
        objects = min(OBJECTS_ROW_MAX, (total - single) // 5)
        batched = total - single - objects
        seconds, nbytes = timed_puts(store, body, single, batched, batch)
        batch_row = Row(f"put batch({batch}) {label}", batched, seconds, nbytes, ceiling_row.per_s)
        seconds, object_bytes = timed_puts(store, body, single + batched, objects, batch, True)
        objects_row = Row(
            f"  as PutResults {label}", objects, seconds, object_bytes, ceiling_row.per_s
        )
        nbytes += object_bytes
        t0 = time.perf_counter()
        dispatched = store.dispatch_until_caught_up()
        reput_seconds = time.perf_counter() - t0
        assert dispatched == total, (dispatched, total)
        reput_row = Row(f"reput {label}", total, reput_seconds, single_row.record_bytes + nbytes)
        latencies = measure_queries(store, total, queries, seed) if queries else []
        pulled = pull_rows(store, pull, batch) if pull else []
    return StoreRun([single_row, batch_row, objects_row], reput_row, latencies, total, pulled)


def measure_queries(store: MessageStore, stored: int, queries: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    end_ms = int(time.time() * 1000) + 60_000
    query = store.query_by_key
    for i in rng.sample(range(stored), min(200, stored)):  # warm up the code paths
        query(TOPIC, business_key(i), 0, end_ms)
    latencies: list[float] = []
    clock = time.perf_counter_ns
    for i in (rng.randrange(stored) for _ in range(queries)):
        key = business_key(i)
        t0 = clock()
        found = query(TOPIC, key, 0, end_ms)
        latencies.append((clock() - t0) / 1e6)
        if len(found) != 1 or found[0].keys != (key,):
            raise SystemExit(f"query for {key} returned {len(found)} messages")
    return latencies


# --- report --------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def print_table(rows: list[Row]) -> None:
    print(f"{'workload':<24}{'messages':>11}{'msg/s':>12}{'MB/s':>9}{'vs ceiling':>12}")
    print("-" * 68)
    for row in rows:
        ratio = f"{row.per_s / row.ceiling_per_s:>11.0%}" if row.ceiling_per_s else ""
        print(f"{row.name:<24}{row.count:>11,}{row.per_s:>12,.0f}{row.mb_per_s:>9.1f} {ratio}")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--messages",
        type=int,
        default=1_000_000,
        help="messages stored with 100-byte bodies (the query set)",
    )
    parser.add_argument(
        "--large-messages", type=int, default=200_000, help="messages stored with 4 KiB bodies"
    )
    parser.add_argument(
        "--single", type=int, default=100_000, help="of those, how many are put one by one"
    )
    parser.add_argument("--batch", type=int, default=32, help="messages per put_batch call")
    parser.add_argument("--queries", type=int, default=20_000, help="key queries to time")
    parser.add_argument(
        "--pull", type=int, default=200_000, help="100-byte messages read back by get_messages"
    )
    parser.add_argument(
        "--quick", action="store_true", help="small counts (100k / 20k / 10k single / 5k queries)"
    )
    parser.add_argument("--dir", default=None, help="where to create the temporary store")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)  # fmt: skip
    if args.quick:
        args.messages, args.large_messages = 100_000, 20_000
        args.single, args.queries, args.pull = 10_000, 5_000, 50_000
    single = min(args.single, args.messages, args.large_messages)

    print(
        f"Cairn engine benchmark: CPython {platform.python_version()} on {platform.system()} "
        f"{platform.machine()}, {os.cpu_count()} CPUs; flush=async; batch={args.batch}"
    )
    rows: list[Row] = []
    reputs: list[Row] = []
    pulls: list[Row] = []
    latencies: list[float] = []
    stored = 0
    segment = StoreConfig().commitlog_file_size
    with tempfile.TemporaryDirectory(prefix="cairn-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        for size, total, queries, pull in (
            (100, args.messages, args.queries, args.pull),
            (4096, args.large_messages, 0, 0),
        ):
            body = random.Random(size).randbytes(size)
            ceiling_row = ceiling(root, body, total - single, segment)
            run = run_store(
                root / f"store-{size}", body, single, total, args.batch, queries, ceiling_row,
                args.seed, pull,
            )  # fmt: skip
            rows += [ceiling_row, *run.rows]
            reputs.append(run.reput)
            pulls += run.pull
            if queries:
                latencies, stored = run.query_ms, run.stored
        rows += reputs + pulls
    print()
    print_table(rows)
    print()
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    print(
        f"query_by_key over {stored:,} stored messages, {len(latencies):,} random keys: "
        f"p50 {p50:.3f} ms, p99 {p99:.3f} ms, max {max(latencies):.3f} ms, "
        f"mean {statistics.fmean(latencies):.3f} ms"
    )
    print()
    batch_rows = [r for r in rows if r.name.startswith("put batch")]
    checks: list[tuple[str, bool]] = [
        (
            f"batch put >= {TARGET_BATCH_RATIO:.0%} of ceiling ({r.name.split()[-2]} B: "
            f"{r.per_s / (r.ceiling_per_s or 1):.0%})",
            r.per_s >= TARGET_BATCH_RATIO * (r.ceiling_per_s or 0),
        )
        for r in batch_rows
    ]
    checks += [
        (f"{r.name} >= {TARGET_REPUT_PER_S:,} msg/s ({r.per_s:,.0f})", r.per_s >= 300_000)
        for r in reputs
    ]
    checks.append((f"query p99 < {TARGET_QUERY_P99_MS} ms ({p99:.3f} ms)", p99 < 1.0))
    for text, ok in checks:
        print(f"  [{verdict(ok)}] {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
