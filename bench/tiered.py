"""Tiered storage benchmark: upload into the POSIX backend, and cold sequential reads from
it next to the local store's own sequential reads, against a raw file copy ceiling.

Usage::

    .venv/bin/python bench/tiered.py                      # 100,000 messages of 1 KiB
    .venv/bin/python bench/tiered.py --messages 20000 --body-size 256
    .venv/bin/python bench/tiered.py --help

What is measured, in one process, over one temporary directory (removed at the end):

* **setup** (not timed): ``--messages`` messages with ``--body-size`` bodies, one key each,
  spread over ``--queues`` queues of one topic, put with ``MessageStore.put_messages`` and
  dispatched.
* **ceiling, raw copy**: the CommitLog's bytes copied to a new file next to the tier
  (1 MiB reads and writes, then one fsync): the most any upload into this directory could
  do, measured in the same run (MB/s).
* **upload**: ``upload_step(force=True)`` until nothing is left: CQ units + records copied
  byte for byte into the flat files, group commits (``TieredConfig`` defaults: 4096
  messages / 4 MiB / 30 s) with fsync and progress metadata, and the key index. MB/s
  counts record bytes; the number of commits is printed (one commit per message means
  group commit degenerated).
* **read local**: ``MessageStore.get_messages`` from offset 0 to the end of every queue,
  32 messages per call (a consumer's sequential pull), decoding every message.
* **read tier, cold**: the same loop through a fresh ``TieredMessageStore`` with the
  ``FORCE`` strategy (so every read is served by the tier, asserted per call through
  ``GetResult.source``); fresh means an empty read-ahead cache. The tier files were just
  written, so they are likely in the page cache: "cold" is cold for the broker (not in the
  local store, not in the read-ahead cache), not for the disk.

Both reads are timed twice in a row; the best is shown.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from mqcore.message import Message
from mqcore.store import MessageStore, StoreConfig
from mqcore.tiered import PosixBackend
from mqcore.tiered.config import ReadStrategy, TieredConfig
from mqcore.tiered.dispatcher import upload_step
from mqcore.tiered.storage import TieredStorage
from mqcore.tiered.tiered_store import SOURCE_TIER, TieredMessageStore

TOPIC = "BenchTiered"
BATCH = 32  # messages per put_messages call (setup) and per get_messages call (reads)
COPY_CHUNK = 1 << 20


def progress(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


def fill(store: MessageStore, messages: int, body_size: int, queues: int) -> int:
    """Put ``messages`` messages; returns the CommitLog bytes written."""
    body = bytes(i % 251 for i in range(body_size))
    per_queue = [messages // queues + (1 if q < messages % queues else 0) for q in range(queues)]
    done = 0
    for queue_id, count in enumerate(per_queue):
        for start in range(0, count, BATCH):
            batch = [
                Message(TOPIC, body, tags="bench", keys=[f"k-{queue_id}-{start + i}"])
                for i in range(min(BATCH, count - start))
            ]
            store.put_messages(batch, queue_id=queue_id)
            done += len(batch)
            if done % 20_000 < BATCH:
                progress(f"put {done:,} / {messages:,}")
    store.dispatch_until_caught_up()
    return store.commit_log.max_offset - store.commit_log.min_offset


def copy_ceiling(store: MessageStore, target: Path) -> tuple[int, float]:
    """Copy the CommitLog's written bytes to ``target``; (bytes, seconds)."""
    left = store.commit_log.max_offset
    files = sorted((store.root / "commitlog").iterdir())
    start = time.perf_counter()
    copied = 0
    with target.open("wb") as out:
        for path in files:
            with path.open("rb") as src:
                while left > 0 and (chunk := src.read(min(COPY_CHUNK, left))):
                    out.write(chunk)
                    copied += len(chunk)
                    left -= len(chunk)
        out.flush()
        os.fsync(out.fileno())
    return copied, time.perf_counter() - start


def upload(store: MessageStore, tier: TieredStorage) -> tuple[int, int, int, float]:
    """(messages, record bytes, commits, seconds) of uploading everything."""
    messages = nbytes = commits = 0
    start = time.perf_counter()
    while True:
        result = upload_step(store, tier, force=True)
        if result.errors or result.gaps:
            raise SystemExit(f"upload failed: {result.errors or result.gaps}")
        messages += result.messages_committed
        nbytes += result.bytes_appended
        commits += result.commits
        progress(f"uploaded {messages:,} messages in {commits:,} commits")
        if not result.progressed:
            return messages, nbytes, commits, time.perf_counter() - start


def read_all(reader: MessageStore | TieredMessageStore, queues: int, want: str | None) -> int:
    """Read every queue from offset 0 to its end; returns the messages read."""
    total = 0
    for queue_id in range(queues):
        offset, end = 0, reader.max_offset(TOPIC, queue_id)
        while offset < end:
            got = reader.get_messages("bench", TOPIC, queue_id, offset, BATCH)
            if not got.messages:
                raise SystemExit(f"read stopped at {queue_id}@{offset}: {got.status}")
            if want is not None and got.source != want:
                raise SystemExit(f"read {queue_id}@{offset} served by {got.source}, not {want}")
            total += len(got.messages)
            offset = got.next_offset
    return total


def best_read(
    make: Callable[[], MessageStore | TieredMessageStore], queues: int, want: str | None, label: str
) -> tuple[int, float]:
    """Best (messages, seconds) of two timed passes, each through a fresh reader."""
    best: tuple[int, float] | None = None
    for attempt in (1, 2):
        reader = make()
        start = time.perf_counter()
        count = read_all(reader, queues, want)
        seconds = time.perf_counter() - start
        progress(f"{label} pass {attempt}: {count / seconds:,.0f} msg/s")
        if best is None or seconds < best[1]:
            best = (count, seconds)
    assert best is not None
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages stored")
    parser.add_argument("--body-size", type=int, default=1024, help="body bytes per message")
    parser.add_argument("--queues", type=int, default=4, help="queues of the topic")
    parser.add_argument("--dir", default=None, help="parent of the temporary directory")
    args = parser.parse_args(argv)
    if args.messages < args.queues or args.body_size < 1 or args.queues < 1:
        parser.error("need --messages >= --queues >= 1 and --body-size >= 1")

    print(
        f"Cairn tiered storage benchmark: CPython {platform.python_version()} on "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs; "
        f"{args.messages:,} messages x {args.body_size} B in {args.queues} queues"
    )
    root = Path(tempfile.mkdtemp(prefix="cairn-bench-tiered-", dir=args.dir))
    try:
        config = StoreConfig(commitlog_file_size=64 * 1024 * 1024, flush="async")
        with MessageStore(root / "store", config) as store:
            record_bytes = fill(store, args.messages, args.body_size, args.queues)
            progress(f"stored {record_bytes / 1e6:,.1f} MB of records")
            (root / "tier").mkdir()
            copied, copy_s = copy_ceiling(store, root / "tier" / "raw-copy")
            (root / "tier" / "raw-copy").unlink()
            progress(f"raw copy {copied / copy_s / 1e6:,.1f} MB/s")

            backend = PosixBackend(root / "tier", "BenchCluster", "bench-broker")
            tier_config = TieredConfig(initial_window_ms=None)
            tier = TieredStorage(backend, store.root, tier_config)
            up_msgs, up_bytes, commits, up_s = upload(store, tier)
            if up_msgs != args.messages:
                raise SystemExit(f"uploaded {up_msgs} of {args.messages} messages")

            local_n, local_s = best_read(lambda: store, args.queues, None, "read local")
            force = dataclasses.replace(tier_config, read_strategy=ReadStrategy.FORCE)

            def cold() -> TieredMessageStore:
                fresh = TieredStorage(backend, store.root, force, readonly=True)
                return TieredMessageStore(store, fresh)

            tier_n, tier_s = best_read(cold, args.queues, SOURCE_TIER, "read tier")

        mb = 1e6
        print()
        print(f"{'workload':<26}{'messages':>11}{'msg/s':>12}{'MB/s':>9}{'note':>24}")
        print("-" * 82)
        print(f"{'ceiling: raw file copy':<26}{'':>11}{'':>12}{copied / copy_s / mb:>9.1f}")
        print(
            f"{'upload to POSIX tier':<26}{up_msgs:>11,}{up_msgs / up_s:>12,.0f}"
            f"{up_bytes / up_s / mb:>9.1f}{f'{commits:,} commits':>24}"
        )
        print(
            f"{'read local, sequential':<26}{local_n:>11,}{local_n / local_s:>12,.0f}"
            f"{record_bytes * local_n / args.messages / local_s / mb:>9.1f}"
        )
        print(
            f"{'read tier, cold, FORCE':<26}{tier_n:>11,}{tier_n / tier_s:>12,.0f}"
            f"{record_bytes * tier_n / args.messages / tier_s / mb:>9.1f}"
            f"{f'{tier_s and local_s / tier_s:.0%} of local':>24}"
        )
        print(
            f"\nupload: {up_bytes / up_s / (copied / copy_s):.0%} of the raw copy ceiling; "
            f"tier read: {(tier_n / tier_s) / (local_n / local_s):.0%} of the local read"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
