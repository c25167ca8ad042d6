"""REST API benchmark: send latency, batch throughput and key queries over loopback HTTP.

    .venv/bin/python bench/rest.py            # full run (~1 min)
    .venv/bin/python bench/rest.py --quick    # smoke run (a few seconds after start-up)
    .venv/bin/python bench/rest.py --help     # counts, body size

The script starts its own broker (``manage.py runbroker`` in a subprocess, data in a temp
dir, a free HTTP port, Kafka listener off), makes an operator token with ``createtoken``,
creates a topic with ``POST /api/v1/topics`` and then drives the API with one keep-alive
``http.client.HTTPConnection`` (standard library only, one request at a time):

1. **single send**: ``POST /api/v1/topics/{topic}/messages`` with one message and one key;
   p50/p99 per request after a warm-up.
2. **batch send**: the same with 1000 messages per request; messages/s over all requests.
3. **key query**: ``GET /api/v1/topics/{topic}/messages?key=&begin=&end=`` for keys that
   exist (each key is on one message of step 1); p50/p99 per request.

Ceilings measured in the same run: ``GET /healthz`` on the same connection (Daphne + Django
with no broker work and no auth) and a raw loopback TCP round trip to a tiny echo server
thread (the socket floor). Each row also shows the broker process's CPU time per request
(from /proc, Linux only): what a request cost the broker itself, background reput included,
which other processes on a busy machine inflate far less than they inflate latency.
Targets: single send p50 < 3 ms, batch >= 50,000 msg/s.
The broker is stopped with SIGTERM at the end and the temp dir removed.
"""

from __future__ import annotations

import argparse
import http.client
import json
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
TOPIC = "RestBench"


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def fmt_ms(samples: list[float]) -> str:
    return (
        f"p50 {percentile(samples, 0.50) * 1e3:7.3f} ms   p99 {percentile(samples, 0.99) * 1e3:7.3f} ms"
        f"   max {max(samples) * 1e3:7.3f} ms   (n={len(samples)})"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- broker ------------------------------------------------------------------------------------


@contextmanager
def broker() -> Iterator[tuple[int, dict[str, str], int]]:
    """A private ``runbroker``; yields (HTTP port, its environment, its pid)."""
    data_dir = tempfile.mkdtemp(prefix="cairn-bench-rest-")
    port = free_port()
    env = dict(
        os.environ,
        CAIRN_DATA_DIR=data_dir,
        CAIRN_HTTP_PORT=str(port),
        CAIRN_KAFKA_PORT="0",
        PYTHONUNBUFFERED="1",
    )
    env.pop("CAIRN_STORE_DIR", None)
    log_path = Path(data_dir) / "broker.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runbroker"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"broker exited ({proc.returncode}):\n{log_path.read_text()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    conn.close()
                    break
                conn.close()
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"broker not healthy after 120 s:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield port, env, proc.pid
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        shutil.rmtree(data_dir, ignore_errors=True)


def create_token(env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "manage.py", "createtoken", "rest-bench", "--role", "operator"],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.strip().splitlines()[-1].strip()


class Client:
    """One keep-alive connection; every call is one request, the response read in full."""

    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.auth = {"Authorization": f"Token {token}"}

    def call(
        self, method: str, path: str, payload: Any = None, *, auth: bool = True
    ) -> tuple[int, bytes]:
        headers = dict(self.auth) if auth else {}
        body = None
        if payload is not None:
            body = json.dumps(payload, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        return response.status, response.read()

    def check(self, method: str, path: str, payload: Any = None, expect: int = 200) -> Any:
        status, data = self.call(method, path, payload)
        if status != expect:
            raise RuntimeError(f"{method} {path}: {status} {data[:500]!r}")
        return json.loads(data) if data else None

    def close(self) -> None:
        self.conn.close()


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) the process has used so far, from /proc (None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """The broker's CPU time per request over one workload: what the request cost the broker
    itself (its HTTP stack, the view, the store, and the background reput it causes), which
    other processes on the machine inflate much less than latency."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.per_request: dict[str, float] = {}

    @contextmanager
    def measure(self, name: str, requests: Callable[[], int]) -> Iterator[None]:
        before = cpu_seconds(self.pid)
        yield
        after = cpu_seconds(self.pid)
        if before is not None and after is not None and requests():
            self.per_request[name] = (after - before) / requests()

    def column(self, name: str) -> str:
        value = self.per_request.get(name)
        return "" if value is None else f"   broker CPU {value * 1e3:7.3f} ms/request"


# -- ceilings ----------------------------------------------------------------------------------


def tcp_echo_round_trip(n: int, size: int = 64) -> list[float]:
    """A thread echo server on loopback; one request of ``size`` bytes, one reply."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while data := conn.recv(65536):
                conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = socket.create_connection(server.getsockname())
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = b"x" * size
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        client.sendall(payload)
        got = 0
        while got < size:
            got += len(client.recv(65536))
        samples.append(time.perf_counter() - start)
    client.close()
    thread.join(5)
    server.close()
    return samples


def healthz(client: Client, n: int, warmup: int) -> list[float]:
    samples = []
    for i in range(n + warmup):
        start = time.perf_counter()
        status, _ = client.call("GET", "/healthz", auth=False)
        elapsed = time.perf_counter() - start
        assert status == 200, status
        if i >= warmup:
            samples.append(elapsed)
    return samples


# -- workloads ---------------------------------------------------------------------------------


def single_send(client: Client, path: str, body: str, n: int, warmup: int) -> list[float]:
    samples = []
    for i in range(n + warmup):
        payload = {"messages": [{"body": body, "keys": [f"single-{i}"]}]}
        start = time.perf_counter()
        status, data = client.call("POST", path, payload)
        elapsed = time.perf_counter() - start
        if status != 200:
            raise RuntimeError(f"single send: {status} {data[:300]!r}")
        if i >= warmup:
            samples.append(elapsed)
    return samples


def batch_send(
    client: Client, path: str, body: str, requests: int, size: int, warmup: int = 2
) -> tuple[float, list[float]]:
    """Messages/s over ``requests`` batches (payloads encoded beforehand, as a client would)."""
    payloads = [
        json.dumps(
            {"messages": [{"body": body, "keys": [f"batch-{r}-{j}"]} for j in range(size)]},
            separators=(",", ":"),
        ).encode()
        for r in range(requests + warmup)
    ]
    headers = dict(client.auth, **{"Content-Type": "application/json"})
    per_request = []
    total_start = 0.0
    for r, payload in enumerate(payloads):
        if r == warmup:
            total_start = time.perf_counter()
        start = time.perf_counter()
        client.conn.request("POST", path, body=payload, headers=headers)
        response = client.conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"batch send: {response.status} {data[:300]!r}")
        if r >= warmup:
            per_request.append(time.perf_counter() - start)
    elapsed = time.perf_counter() - total_start
    return requests * size / elapsed, per_request


def key_query(
    client: Client, topic_path: str, keys: list[str], begin: int, end: int
) -> list[float]:
    samples = []
    for key in keys:
        path = f"{topic_path}?key={quote(key)}&begin={begin}&end={end}"
        start = time.perf_counter()
        status, data = client.call("GET", path)
        elapsed = time.perf_counter() - start
        if status != 200:
            raise RuntimeError(f"key query: {status} {data[:300]!r}")
        if not json.loads(data)["messages"]:
            raise RuntimeError(f"key query for {key!r} found nothing")
        samples.append(elapsed)
    return samples


def wait_indexed(client: Client, topic_path: str, key: str, begin: int, end: int) -> None:
    """Keys are indexed by reput, asynchronously: wait for the last one sent."""
    deadline = time.monotonic() + 60
    path = f"{topic_path}?key={quote(key)}&begin={begin}&end={end}"
    while not client.check("GET", path)["messages"]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"key {key!r} not indexed after 60 s")
        time.sleep(0.01)


# -- main --------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small counts for a smoke run")
    parser.add_argument("--sends", type=int, default=2000, help="single sends measured")
    parser.add_argument("--batches", type=int, default=30, help="batch requests measured")
    parser.add_argument("--batch-size", type=int, default=1000, help="messages per batch")
    parser.add_argument("--queries", type=int, default=1000, help="key queries measured")
    parser.add_argument("--body-bytes", type=int, default=100, help="message body size")
    args = parser.parse_args()
    if args.quick:
        args.sends, args.batches, args.queries = 200, 5, 100
    warmup = 20 if args.quick else 200
    args.queries = min(args.queries, args.sends)
    body = "x" * args.body_bytes

    print(
        f"machine: {os.cpu_count()} CPUs, {platform.machine()}, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}"
    )
    print(
        f"broker: manage.py runbroker (inline services, async flush, SQLite), loopback; "
        f"bodies of {args.body_bytes} bytes, one key each; one keep-alive connection"
    )
    echo = tcp_echo_round_trip(args.sends + warmup)[warmup:]
    with broker() as (port, env, pid):
        token = create_token(env)
        client = Client(port, token)
        cpu = CpuMeter(pid)
        try:
            client.check(
                "POST",
                "/api/v1/topics",
                {"name": TOPIC, "read_queue_nums": 8, "write_queue_nums": 8},
                expect=201,
            )
            topic_path = f"/api/v1/topics/{quote(TOPIC, safe='')}/messages"
            with cpu.measure("healthz", lambda: args.sends + warmup):
                ceiling = healthz(client, args.sends, warmup)
            begin = int(time.time() * 1000) - 1000
            with cpu.measure("single", lambda: args.sends + warmup):
                single = single_send(client, topic_path, body, args.sends, warmup)
            with cpu.measure("batch", lambda: args.batches + 2):
                rate, per_batch = batch_send(
                    client, topic_path, body, args.batches, args.batch_size
                )
            end = int(time.time() * 1000) + 1000
            wait_indexed(client, topic_path, f"single-{args.sends + warmup - 1}", begin, end)
            step = max(1, args.sends // args.queries)
            keys = [f"single-{warmup + i * step}" for i in range(args.queries)]
            with cpu.measure("query", lambda: len(keys)):
                query = key_query(client, topic_path, keys, begin, end)
        finally:
            client.close()

    print("ceilings (this machine, this run):")
    print(f"  TCP echo round trip (64 B)         {fmt_ms(echo)}")
    print(f"  GET /healthz (HTTP stack, no auth) {fmt_ms(ceiling)}{cpu.column('healthz')}")
    print("results:")
    print(f"  single send (1 msg/request)        {fmt_ms(single)}{cpu.column('single')}")
    print(
        f"  {f'batch send ({args.batch_size} msgs/request)':34} {fmt_ms(per_batch)}"
        f"{cpu.column('batch')}"
    )
    print(f"  key query                          {fmt_ms(query)}{cpu.column('query')}")

    single_p50 = percentile(single, 0.50)
    rows = [
        (
            "single send p50",
            f"{single_p50 * 1e3:.3f} ms",
            "< 3 ms",
            single_p50 < 0.003,
        ),
        ("single send p99", f"{percentile(single, 0.99) * 1e3:.3f} ms", "-", None),
        ("batch send", f"{rate:,.0f} msg/s", ">= 50,000 msg/s", rate >= 50_000),
        ("key query p50", f"{percentile(query, 0.50) * 1e3:.3f} ms", "-", None),
        ("key query p99", f"{percentile(query, 0.99) * 1e3:.3f} ms", "-", None),
        ("ceiling: /healthz p50", f"{percentile(ceiling, 0.50) * 1e3:.3f} ms", "-", None),
        ("ceiling: /healthz p99", f"{percentile(ceiling, 0.99) * 1e3:.3f} ms", "-", None),
        ("ceiling: TCP echo p50", f"{percentile(echo, 0.50) * 1e3:.3f} ms", "-", None),
        ("ceiling: TCP echo p99", f"{percentile(echo, 0.99) * 1e3:.3f} ms", "-", None),
    ]
    print()
    print(f"  {'figure':24} {'measured':>16}   {'target':16} verdict")
    for name, value, target, met in rows:
        verdict = "" if met is None else ("met" if met else "NOT MET")
        print(f"  {name:24} {value:>16}   {target:16} {verdict}")


if __name__ == "__main__":
    main()
