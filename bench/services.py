"""Background services benchmark: consume latency and reput throughput, inline and Celery mode.

    .venv/bin/python bench/services.py                 # both modes
    .venv/bin/python bench/services.py --mode inline --messages 5000

Latency is measured from ``put_message`` returning to ``get_messages`` first returning the
message, one message at a time (a consumer woken by the store's listeners, as a long-polling
pull is, with a 0.5 ms poll as a fallback). Targets: inline p99 < 5 ms, celery p99 < 50 ms.
Throughput is reput on a backlog: the records per second one reput runner dispatches into
the ConsumeQueue and the IndexFile, in-process and on a Celery worker.

The machine's ceilings are measured in the same run: a thread wake-up (the inline path's
floor), a Redis round trip (celery's), decoding the CommitLog without writing anything
(reput's), and appending to the CommitLog.

Celery mode needs ``redis-server`` (or ``CAIRN_REDIS_URL``); a private one is started on a
free port when the variable is unset. Nothing is left behind: the store lives in a temp dir.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import redis  # noqa: E402

from mqcore.format.record import DispatchRequest  # noqa: E402
from mqcore.message import Message  # noqa: E402
from mqcore.services import inline, reput  # noqa: E402
from mqcore.store import GetStatus, MessageStore, StoreConfig  # noqa: E402
from mqcore.store.sharing.progress import Slot  # noqa: E402
from tests.support.redis_server import private_redis  # noqa: E402
from workers import events  # noqa: E402

TOPIC = "BenchTopic"
BODY = b"x" * 200
CONFIG = StoreConfig()  # RocketMQ's defaults: 1 GiB CommitLog segments, sparse


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def fmt_ms(samples: list[float]) -> str:
    return (
        f"p50 {percentile(samples, 0.50) * 1e3:7.3f} ms   p99 {percentile(samples, 0.99) * 1e3:7.3f} ms"
        f"   max {max(samples) * 1e3:7.3f} ms   (n={len(samples)})"
    )


# -- ceilings ----------------------------------------------------------------------------------


def thread_wakeup(n: int = 2000) -> list[float]:
    """Event.set in one thread to Event.wait returning in another."""
    ready, go, done = threading.Event(), threading.Event(), threading.Event()
    samples: list[float] = []
    stamp = [0.0]

    def waiter() -> None:
        for _ in range(n):
            ready.set()
            go.wait()
            go.clear()
            samples.append(time.perf_counter() - stamp[0])
            done.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    for _ in range(n):
        ready.wait()
        ready.clear()
        stamp[0] = time.perf_counter()
        go.set()
        done.wait()
        done.clear()
    thread.join()
    return samples


def redis_round_trip(url: str, n: int = 2000) -> list[float]:
    client = redis.Redis.from_url(url)
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        client.ping()
        samples.append(time.perf_counter() - start)
    client.close()
    return samples


def write_backlog(store: MessageStore, count: int) -> tuple[float, int]:
    """Append ``count`` messages in batches; returns (messages/s, bytes written)."""
    before = store.commit_log.max_offset
    batch = [Message(TOPIC, BODY, keys=[f"k{i}"]) for i in range(256)]
    start = time.perf_counter()
    for i in range(0, count, 256):
        results = store.put_messages(batch[: min(256, count - i)], i // 256 % 4)
        assert results[-1].ok
    elapsed = time.perf_counter() - start
    return count / elapsed, store.commit_log.max_offset - before


def decode_only(store: MessageStore, start: int, end: int) -> float:
    """Records/s for walking the CommitLog with reput's decoder, writing nothing."""
    records = 0
    begin = time.perf_counter()
    offset = start
    while offset < end:
        for item in store.commit_log.iter_dispatch(offset, end, 4 << 20, store.delay_levels_ms):
            if isinstance(item, int):
                offset = item
            else:
                records += 1
    return records / (time.perf_counter() - begin)


# -- latency -----------------------------------------------------------------------------------


def consume_latency(
    store: MessageStore, count: int, interval_s: float, warmup: int = 50
) -> list[float]:
    arrived = threading.Event()

    def listener(_request: DispatchRequest) -> None:
        arrived.set()

    store.add_listener(listener)
    queue_id = 7
    offset = store.max_offset(TOPIC, queue_id)
    samples: list[float] = []
    try:
        for i in range(count + warmup):
            arrived.clear()
            result = store.put_message(Message(TOPIC, BODY), queue_id)
            start = time.perf_counter()
            assert result.ok, result
            while (
                store.get_messages("bench", TOPIC, queue_id, offset, 1).status
                is not GetStatus.FOUND
            ):
                arrived.wait(0.0005)
                if time.perf_counter() - start > 30:
                    raise RuntimeError(f"message {i} not consumable after 30 s")
            if i >= warmup:
                samples.append(time.perf_counter() - start)
            offset += 1
            time.sleep(interval_s)
    finally:
        store.remove_listener(listener)
    return samples


# -- modes -------------------------------------------------------------------------------------


def run_inline(args: argparse.Namespace, root: Path) -> dict[str, object]:
    with MessageStore(root, CONFIG, role=inline.store_role("inline")) as store:
        loops = inline.build_service_loops(store)
        for loop in loops:
            loop.start()
        try:
            latency = consume_latency(store, args.messages, args.interval_ms / 1000)
        finally:
            for loop in loops:
                loop.stop()
        # Reput throughput: a backlog written with no reput running, then one runner.
        start = store.reput_offset
        put_rate, size = write_backlog(store, args.backlog)
        ceiling = decode_only(store, start, store.commit_log.max_offset)
        begin = time.perf_counter()
        dispatched = 0
        while (result := reput.step(store)).progressed:
            dispatched += result.detail["dispatched"]
        elapsed = time.perf_counter() - begin
    return {
        "latency": latency,
        "reput_rate": dispatched / elapsed,
        "reput_mb_s": size / elapsed / 1e6,
        "put_rate": put_rate,
        "decode_rate": ceiling,
    }


@contextmanager
def redis_server() -> Iterator[str]:
    """CAIRN_REDIS_URL when set, else a private redis-server for this run."""
    configured = os.environ.get("CAIRN_REDIS_URL", "").strip()
    if configured:
        yield configured
        return
    with tempfile.TemporaryDirectory(prefix="cairn-bench-redis-") as workdir:
        try:
            with private_redis(Path(workdir)) as url:
                yield url
        except RuntimeError as exc:
            raise SystemExit(f"celery mode needs {exc} or CAIRN_REDIS_URL") from None


def start_worker(root: Path, url: str, log: Path, *, beat: bool) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        CAIRN_REDIS_URL=url,
        CAIRN_STORE_DIR=str(root),
        CAIRN_BEAT_SCHEDULE_FILE=str(log) + ".beat",
    )
    command = [
        sys.executable, "-m", "celery", "-A", "workers", "worker", "--pool=threads", "--concurrency=4",
        "--loglevel=WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    if beat:
        command.append("--beat")
    with log.open("ab") as out:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait(condition: Callable[[], bool], what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.001)


def run_celery(args: argparse.Namespace, root: Path, url: str) -> dict[str, object]:
    redis.Redis.from_url(url).flushdb()
    store = MessageStore(root, CONFIG, role=inline.store_role("celery")).open()
    progress = store.progress
    assert progress is not None
    log = root.parent / "worker.log"
    loops = inline.build_service_loops(store)
    subscriber = events.wake_on_events(url, root, loops)
    for loop in loops:
        loop.start()
    worker = start_worker(root, url, log, beat=True)
    try:
        # The first message waits for the worker to start; not part of the figures.
        store.put_message(Message(TOPIC, BODY), 7)
        wait(lambda: progress.get(Slot.REPUT_OFFSET) == store.commit_log.max_offset, "the worker")
        latency = consume_latency(store, args.messages, args.interval_ms / 1000)
    finally:
        worker.terminate()
        worker.wait(120)
    # Reput throughput: the backlog is written while no worker runs, then one worker.
    start = progress.get(Slot.REPUT_OFFSET)
    put_rate, size = write_backlog(store, args.backlog)
    end = store.commit_log.max_offset
    worker = start_worker(root, url, log, beat=False)
    try:
        from celery import Celery

        Celery("bench", broker=url, backend=url).send_task("cairn.reput")
        wait(lambda: progress.get(Slot.REPUT_OFFSET) > start, "reput to start")
        begin = time.perf_counter()
        moved_from = progress.get(Slot.REPUT_OFFSET)
        wait(lambda: progress.get(Slot.REPUT_OFFSET) >= end, "reput to catch up", 600)
        elapsed = time.perf_counter() - begin
    finally:
        worker.terminate()
        worker.wait(120)
        subscriber.stop()
        for loop in loops:
            loop.stop()
        store.close()
    fraction = (end - moved_from) / max(1, end - start)
    return {
        "latency": latency,
        "reput_rate": args.backlog * fraction / elapsed,
        "reput_mb_s": size * fraction / elapsed / 1e6,
        "put_rate": put_rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=("inline", "celery", "both"), default="both")
    parser.add_argument("--messages", type=int, default=2000, help="latency samples per mode")
    parser.add_argument("--interval-ms", type=float, default=1.0, help="pause between two sends")
    parser.add_argument(
        "--backlog", type=int, default=100_000, help="messages for the throughput run"
    )
    args = parser.parse_args()

    print(
        f"machine: {os.cpu_count()} CPUs, {platform.machine()}, {platform.system()} {platform.release()}, Python {platform.python_version()}"
    )
    print(f"store: RocketMQ default geometry, flush {CONFIG.flush}; messages of {len(BODY)} bytes")
    print("ceilings (this machine, this run):")
    print(f"  thread wake-up (inline floor)     {fmt_ms(thread_wakeup())}")
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="cairn-bench-") as tmp:
        if args.mode in ("inline", "both"):
            results["inline"] = run_inline(args, Path(tmp) / "inline")
            decode = results["inline"]["decode_rate"]
            print(f"  CommitLog decode only (reput's)   {decode:12,.0f} records/s")  # type: ignore[str-format]
            print(
                f"  CommitLog append (batches of 256) {results['inline']['put_rate']:12,.0f} messages/s"
            )  # type: ignore[str-format]
        if args.mode in ("celery", "both"):
            with redis_server() as url:
                print(f"  Redis round trip (celery floor)   {fmt_ms(redis_round_trip(url))}")
                results["celery"] = run_celery(args, Path(tmp) / "celery", url)
    targets = {"inline": 0.005, "celery": 0.050}
    print("results:")
    for mode, figures in results.items():
        latency: list[float] = figures["latency"]  # type: ignore[assignment]
        p99 = percentile(latency, 0.99)
        verdict = "PASS" if p99 < targets[mode] else "FAIL"
        print(
            f"  {mode:6} put -> get_messages    {fmt_ms(latency)}   target p99 < {targets[mode] * 1e3:.0f} ms: {verdict}"
        )
        print(f"  {mode:6} mean {statistics.mean(latency) * 1e3:.3f} ms")
        print(
            f"  {mode:6} reput throughput      {figures['reput_rate']:12,.0f} records/s"
            f"  {figures['reput_mb_s']:6.1f} MB/s of CommitLog"
        )


if __name__ == "__main__":
    main()
