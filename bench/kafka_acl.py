"""What the Kafka listener's ACL check costs the broker per produced message (issue 18:
under 2% of its CPU).

Usage::

    .venv/bin/python bench/kafka_acl.py                   # 3 rounds of 300,000 messages
    .venv/bin/python bench/kafka_acl.py --messages 100000 --rounds 2 --entries 1000
    .venv/bin/python bench/kafka_acl.py --linger-ms 0     # smaller produce requests

Two broker processes per round, one after the other (their order alternates between
rounds), each ``Broker`` + services + ``KafkaListener`` on a fresh store, as
``bench/kafka.py --serve`` runs it:

* **roles**: the accounts store has no ACL entries; the connection is the anonymous
  operator, allowed by its role;
* **acl**: ``--entries`` entries (other users' literal and prefixed topic and group
  entries, a deny) and, for the connection (``User:ANONYMOUS`` with no role), a prefixed
  allow of WRITE on ``bench.`` (the store's ``bench|``): every decision is the ACL's.

confluent-kafka produces ``--messages`` 100-byte messages (``--linger-ms``, default 5;
acks 1) into
``bench.produce`` after a warm-up of 20,000; the broker process's CPU time (user +
system, ``/proc/<pid>/stat``) over the measured produce is reported per million messages,
with the median over the rounds and the ACL run's difference to the roles run.

The difference of two whole-process figures is noisy (a few percent from run to run on a
shared machine), so the same run also measures the check itself in-process: ``Call.check``
as the produce handler makes it once per topic per request (the connection's cached
decision: a dict lookup), and an uncached ``Authorizer.decide`` over the entries (what the
first request of a connection, or the first after an ACL change, pays). The per-message
share is the cached check's cost divided by the messages per produce request, bounded
here by the worst case of one message per request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mqcore.access.authorizer import Authorizer, CachedDecisions, Subject  # noqa: E402
from mqcore.access.model import (  # noqa: E402
    AclEntry,
    Operation,
    PatternType,
    Permission,
    Principal,
    Resource,
    ResourceType,
)

TOPIC = "bench.produce"
VALUE = b"x" * 100
WARM_UP = 20_000


def bench_entries(count: int) -> list[AclEntry]:
    """``count`` entries: the connection's prefixed allow, a deny for it elsewhere, and
    other users' topic and group entries (a third of them prefixed)."""
    me = Principal.user("ANONYMOUS")
    entries = [
        AclEntry(me, ResourceType.TOPIC, "bench|", PatternType.PREFIXED, Operation.WRITE,
                 Permission.ALLOW),
        AclEntry(me, ResourceType.TOPIC, "bench|secret", PatternType.LITERAL, Operation.ALL,
                 Permission.DENY),
    ]  # fmt: skip
    for i in range(count - len(entries)):
        rtype = ResourceType.GROUP if i % 4 == 3 else ResourceType.TOPIC
        pattern = PatternType.PREFIXED if i % 3 == 0 else PatternType.LITERAL
        entries.append(AclEntry(Principal.user(f"user{i}"), rtype, f"app{i}|", pattern,
                                Operation.WRITE if i % 2 else Operation.READ,
                                Permission.ALLOW))  # fmt: skip
    return entries


# -- the broker process ------------------------------------------------------------------


def serve(root: str, port: int, mode: str, entries: int) -> None:
    """``--serve``: one broker process (runs until SIGTERM)."""
    from kafka_listener.handlers import HANDLERS, ListenerConfig
    from kafka_listener.schemas import ApiKey
    from kafka_listener.server import KafkaListener
    from mqcore.access.backend import StaticAccess
    from mqcore.broker.broker import Broker
    from mqcore.services import inline

    broker = Broker.open(root)
    broker.admin.create_topic(TOPIC.replace(".", "|"), read_queue_nums=1, write_queue_nums=1)
    loops = inline.build_service_loops(broker.store)
    for loop in loops:
        loop.start()
    acl = mode == "acl"
    config = ListenerConfig(port=port, anonymous_role="" if acl else "operator")

    requests = [0]
    produce_handler = HANDLERS[ApiKey.PRODUCE]

    async def counted(ctx: Any, call: Any) -> Any:
        requests[0] += 1
        return await produce_handler(ctx, call)

    HANDLERS[ApiKey.PRODUCE] = counted

    async def main() -> None:
        listener = KafkaListener(broker, config)
        listener.ctx.access = StaticAccess(entries=bench_entries(entries) if acl else ())
        await listener.start()
        done = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, done.set)
        await done.wait()
        await listener.close()
        (Path(root) / "produce-requests").write_text(str(requests[0]))

    try:
        asyncio.run(main())
    finally:
        for loop in loops:
            loop.stop()
        broker.close()


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the broker process exited")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the broker did not listen")


def produce(bootstrap: str, count: int, linger_ms: float) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "acks": 1,
                         "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000})  # fmt: skip
    failed: list[Any] = []
    for _ in range(count):
        while True:
            try:
                producer.produce(TOPIC, VALUE, on_delivery=lambda e, m: e and failed.append(e))
                break
            except BufferError:
                producer.poll(0.001)
    if producer.flush(120) or failed:
        raise RuntimeError(f"produce failed: {failed[:1]}")


def one_run(mode: str, messages: int, entries: int, linger_ms: float) -> tuple[float, float]:
    """Broker CPU seconds per million produced messages in ``mode``, and the messages per
    produce request (warm-up included)."""
    with tempfile.TemporaryDirectory() as root:
        port = free_port()
        args = [sys.executable, __file__, "--serve", root, str(port), mode, str(entries)]
        proc = subprocess.Popen(args)
        try:
            wait_port(port, proc)
            bootstrap = f"127.0.0.1:{port}"
            produce(bootstrap, WARM_UP, linger_ms)
            before = process_cpu_s(proc.pid)
            produce(bootstrap, messages, linger_ms)
            used = process_cpu_s(proc.pid) - before
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        requests = int((Path(root) / "produce-requests").read_text())
    return used / messages * 1e6, (messages + WARM_UP) / max(1, requests)


# -- the check in-process ------------------------------------------------------------------


def check_costs(entries: int) -> tuple[float, float, float]:
    """ns of a cached ``Call.check`` (as the produce handler makes it), of the roles-only
    check, and of an uncached ``Authorizer.decide`` over ``entries`` entries."""
    from kafka_listener.handlers import Call
    from kafka_listener.handlers.authz import store_topic_resource
    from mqcore.access.backend import StaticAccess

    def cached(access: StaticAccess, subject: Subject, n: int = 1_000_000) -> float:
        ctx: Any = SimpleNamespace(access=access)
        call = Call(0, 7, 1, "bench", {}, None, CachedDecisions(subject))
        check = call.check
        store_topic = TOPIC.replace(".", "|")
        started = time.perf_counter()
        for _ in range(n):
            check(ctx, Operation.WRITE, store_topic_resource(store_topic))
        return (time.perf_counter() - started) / n * 1e9

    acl_ns = cached(StaticAccess(entries=bench_entries(entries)), Subject(None, None))
    roles_ns = cached(StaticAccess(), Subject(None, "operator"))
    authorizer = Authorizer(bench_entries(entries), version=1)
    resource = Resource(ResourceType.TOPIC, "bench|produce")
    subject = Subject(None, None)
    n = 2_000
    started = time.perf_counter()
    for _ in range(n):
        authorizer.decide(subject, Operation.WRITE, resource)
    decide_ns = (time.perf_counter() - started) / n * 1e9
    return acl_ns, roles_ns, decide_ns


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--linger-ms", type=float, default=5, help="0: smaller requests")
    args = parser.parse_args()

    figures: dict[str, list[float]] = {"roles": [], "acl": []}
    per_request: list[float] = []
    for round_no in range(args.rounds):
        order = ("roles", "acl") if round_no % 2 == 0 else ("acl", "roles")
        for mode in order:
            cpu, batch = one_run(mode, args.messages, args.entries, args.linger_ms)
            figures[mode].append(cpu)
            per_request.append(batch)
            print(f"round {round_no + 1} {mode:5}: {cpu:7.2f} broker CPU s per million "
                  f"messages, {batch:,.0f} messages per produce request", flush=True)  # fmt: skip
    roles, acl = statistics.median(figures["roles"]), statistics.median(figures["acl"])
    acl_ns, roles_ns, decide_ns = check_costs(args.entries)
    per_message_ns = roles * 1e3  # CPU s per million messages -> ns per message
    print(f"\nmedian over {args.rounds} rounds of {args.messages:,} messages "
          f"(100-byte values, linger.ms {args.linger_ms:g}, acks 1), {args.entries:,} ACL entries:")  # fmt: skip
    print(f"  roles only      {roles:7.2f} broker CPU s / million messages")
    print(f"  ACL entries     {acl:7.2f} broker CPU s / million messages "
          f"({(acl - roles) / roles:+.1%}, whole process, noisy)")  # fmt: skip
    print(f"  cached check    {acl_ns:7.0f} ns per produce request with ACL entries "
          f"({roles_ns:.0f} ns roles only)")  # fmt: skip
    print(
        f"  uncached decide {decide_ns / 1000:7.1f} us over {args.entries:,} entries "
        "(once per connection and ACL change)"
    )
    batch = statistics.median(per_request)
    print(f"  check share     {acl_ns / batch / per_message_ns:7.3%} of broker CPU per message "
          f"at {batch:,.0f} messages per produce request (median)")  # fmt: skip


if __name__ == "__main__":
    main()
