"""The fault-injection harness: a real broker process, a ledger of every acknowledgement, and
the check of that ledger after a fault.

One run of a fault test:

1. A **base store** is written once per session by a real ``manage.py runbroker``
   (:mod:`tests.faults.conftest`): messages with keys sent over REST and produced by
   confluent-kafka, every acknowledgement recorded in a :class:`Ledger` (topic, queue, queue
   offset, msg id, key, body digest), then the broker is stopped (SIGTERM) or killed (SIGKILL).
2. The run copies the base (the bytes that broker wrote), injects one fault into the stopped
   copy (:mod:`tests.faults.inject`), starts a broker on it and calls :func:`verify`.
3. :func:`verify` reads every acknowledged message back over REST, by queue and offset (a
   pull) and by key (a key query), and classifies it (:class:`Verdict`): read back intact,
   **lost** (not readable and not reported), **corrupted-served** (returned with a different
   body: always a failure) or **reported** (the fault destroyed its own bytes and the broker
   says so in ``GET /api/v1/status`` health problems or ``<store>/quarantine/``). It also
   holds the broker's health surface to account (``/healthz`` is ``degraded`` while an
   unacknowledged problem or a condition exists; a fault that must be noticed is noticed),
   and :meth:`Verdict.check_store` runs ``python -m mqcore check`` on the stopped store and
   compares its answer with the broker's.

Each run appends one row to ``test-output/faults/results.jsonl`` (:func:`record_row`); the
session's table is printed by ``tests/faults/conftest.py``.

The harness knows the store only through the REST API, the health surface and the files the
broker reports in; the ledger comes from the producers' acknowledgements, so a bug in the
store cannot hide itself by agreeing with the ledger.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.support.manage import REPO, SHARED_SETTINGS, broker_env, start_runbroker
from tests.support.redis_server import free_port, wait_for_port

RESULTS_DIR = REPO / "test-output" / "faults"
RESULTS_FILE = RESULTS_DIR / "results.jsonl"

#: Small files, so that every file type rolls several times in a few thousand messages.
GEOMETRY = {
    "CAIRN_COMMITLOG_FILE_SIZE": str(256 * 1024),
    "CAIRN_CQ_FILE_ENTRIES": "200",
    "CAIRN_INDEX_HASH_SLOTS": "512",
    "CAIRN_INDEX_MAX_ENTRIES": "1000",
}
#: Messages sharing one key (a key query returns up to 64): one query checks this many.
KEY_SPAN = 16
#: Largest page of a pull (the API's MAX_PAGE_MESSAGES).
PAGE = 1000
SETTLE_TIMEOUT_S = 90.0


# --- HTTP -------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    body: Any
    text: str


class Http:
    """JSON calls to the broker; HTTP errors are replies (status and body), not exceptions.
    Connection errors (the broker is down) raise ``OSError``."""

    def __init__(self, base: str, token: str | None = None) -> None:
        self.base, self.token = base, token

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        timeout: float = 30.0,
    ) -> Reply:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Token {self.token}"
        request = urllib.request.Request(
            f"{self.base}{path}{query}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers=headers,
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            try:
                status, raw = exc.code, exc.read()
            finally:
                exc.close()
        text = raw.decode("utf-8", "replace")
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return Reply(status, parsed, text)

    def api(self, method: str, path: str, body: Any = None, **params: Any) -> Reply:
        return self.call(method, f"/api/v1{path}", body, params=params or None)


def quote_topic(topic: str) -> str:
    return urllib.parse.quote(topic, safe="")


# --- the broker process -----------------------------------------------------------------


class Broker:
    """``manage.py runbroker`` on a data dir (and optionally a store dir elsewhere), with the
    suite's small geometry and sync flush unless ``settings`` say otherwise. The HTTP and
    Kafka ports stay the same across restarts (Kafka clients reconnect to them)."""

    def __init__(
        self,
        data_dir: Path,
        token: str,
        *,
        store_dir: Path | None = None,
        kafka: bool = True,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.http_port = free_port()
        self.kafka_port = free_port() if kafka else 0
        merged = {**GEOMETRY, "CAIRN_FLUSH": "sync", **(settings or {})}
        self.env = broker_env(
            data_dir, self.http_port, self.kafka_port, drop=SHARED_SETTINGS, **merged
        )
        if store_dir is not None:
            self.env["CAIRN_STORE_DIR"] = str(store_dir)
        self.store = store_dir if store_dir is not None else data_dir / "store"
        self.log_path = data_dir / "broker.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = Http(f"http://127.0.0.1:{self.http_port}", token)
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the process and return at once (see :meth:`start`)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        with self.log_path.open("ab") as log:
            log.write(f"\n===== start {self.starts} =====\n".encode())
            log.flush()
            self.proc = start_runbroker(self.env, log)
        self.starts += 1
        return self.proc

    def start(self, timeout_s: float = 60.0) -> Broker:
        """Start and wait until both ports answer. Raises ``BrokerDied`` if it exits first."""
        proc = self.spawn()
        try:
            wait_for_port(self.http_port, timeout_s, proc)
            if self.kafka_port:
                wait_for_port(self.kafka_port, timeout_s, proc)
        except (RuntimeError, TimeoutError) as exc:
            if proc.poll() is None:
                self.kill()
            raise BrokerDied(f"{exc}; exit code {proc.returncode}", self.log_tail()) from None
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait; the exit code (killed with SIGKILL after ``timeout_s``: -9)."""
        proc = self.proc
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL (kill -9) and reap."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    def log_tail(self, chars: int = 3000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-chars:]

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


class BrokerDied(Exception):
    """The broker exited (or never opened its ports) when it should have been serving."""

    def __init__(self, what: str, log_tail: str) -> None:
        super().__init__(what)
        self.what, self.log_tail = what, log_tail


def manage_run(
    env: Mapping[str, str], *args: str, timeout_s: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGS`` in ``env``; the completed process (the caller checks the code)."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


# --- the ledger -------------------------------------------------------------------------


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:32]


def body_for(prefix: str, n: int) -> bytes:
    """Message ``n``'s body: its name, then 60..460 printable filler bytes, varied by ``n``."""
    head = f"{prefix}#{n}|"
    length = 60 + (n * 7919) % 400
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    fill = "".join(alphabet[(n * 31 + i * 17) % len(alphabet)] for i in range(length))
    return (head + fill).encode()


def key_for(prefix: str, n: int, span: int = KEY_SPAN) -> str:
    """Message ``n``'s key: ``span`` consecutive messages share it."""
    return f"{prefix}-k{n // span}"


@dataclass(frozen=True)
class Ack:
    """One acknowledged message, as its producer was told, plus where the baseline read found
    it in the CommitLog (``phys_offset``/``size``, -1/0 until :meth:`Ledger.place`)."""

    topic: str
    queue_id: int
    queue_offset: int
    key: str
    digest: str
    msg_id: str = ""
    via: str = "rest"
    phys_offset: int = -1
    size: int = 0

    @property
    def where(self) -> tuple[str, int, int]:
        return (self.topic, self.queue_id, self.queue_offset)

    def label(self) -> str:
        return f"{self.topic}/{self.queue_id}@{self.queue_offset} key {self.key} ({self.via}, phys {self.phys_offset})"


class Ledger:
    """Every acknowledgement, in the order they arrived. Thread-safe appends."""

    def __init__(self, acks: Iterable[Ack] = ()) -> None:
        self.acks: list[Ack] = list(acks)
        self._lock = threading.Lock()

    def add(self, ack: Ack) -> None:
        with self._lock:
            self.acks.append(ack)

    def __len__(self) -> int:
        return len(self.acks)

    def copy(self) -> Ledger:
        return Ledger(self.acks)

    def by_queue(self) -> dict[tuple[str, int], list[int]]:
        queues: dict[tuple[str, int], list[int]] = defaultdict(list)
        for i, a in enumerate(self.acks):
            queues[(a.topic, a.queue_id)].append(i)
        return dict(queues)

    def by_key(self) -> dict[tuple[str, str], list[int]]:
        keys: dict[tuple[str, str], list[int]] = defaultdict(list)
        for i, a in enumerate(self.acks):
            keys[(a.topic, a.key)].append(i)
        return dict(keys)

    def place(self, served: Mapping[tuple[str, int, int], Served]) -> Ledger:
        """A copy with each ack's CommitLog position taken from a read of a healthy store
        (``served``, :func:`read_queues`); the body digests must match."""
        placed = []
        for a in self.acks:
            s = served.get(a.where)
            assert s is not None and s.digest == a.digest, f"baseline read misses {a.label()}"
            placed.append(Ack(**{**asdict(a), "phys_offset": s.phys_offset, "size": s.store_size}))
        return Ledger(placed)

    def overlapping(self, start: int, end: int) -> set[int]:
        """Indexes of acks whose record overlaps CommitLog bytes ``[start, end)``."""
        return {
            i
            for i, a in enumerate(self.acks)
            if a.phys_offset < end and a.phys_offset + a.size > start
        }

    def save(self, path: Path) -> None:
        path.write_text("\n".join(json.dumps(asdict(a)) for a in self.acks) + "\n")

    @classmethod
    def load(cls, path: Path) -> Ledger:
        return cls(Ack(**json.loads(line)) for line in path.read_text().splitlines() if line)


# --- producers --------------------------------------------------------------------------


def send_rest(
    http: Http,
    ledger: Ledger,
    topic: str,
    prefix: str,
    start: int,
    count: int,
    *,
    queues: int,
    batch: int = 50,
) -> int:
    """Send messages ``start .. start+count`` of ``prefix`` to ``topic`` in batches (message
    ``n`` to queue ``n % queues``), recording each acknowledgement. Returns the next ``n``."""
    n = start
    while n < start + count:
        size = min(batch, start + count - n)
        reply = send_rest_batch(http, ledger, topic, prefix, n, size, queues=queues)
        assert reply.status == 200, f"send to {topic}: {reply.status} {reply.text[:300]}"
        n += size
    return n


def send_rest_batch(
    http: Http,
    ledger: Ledger,
    topic: str,
    prefix: str,
    start: int,
    size: int,
    *,
    queues: int,
    body: Callable[[str, int], bytes] = body_for,
) -> Reply:
    """One batch; acknowledged messages go into ``ledger``. The reply (any status)."""
    numbers = range(start, start + size)
    bodies = [body(prefix, n) for n in numbers]
    messages = [
        {"body": b.decode(), "keys": [key_for(prefix, n)], "queue_id": n % queues}
        for n, b in zip(numbers, bodies, strict=True)
    ]
    reply = http.api("POST", f"/topics/{quote_topic(topic)}/messages", {"messages": messages})
    if reply.status == 200:
        for n, b, result in zip(numbers, bodies, reply.body["results"], strict=True):
            ledger.add(
                Ack(
                    topic=topic,
                    queue_id=result["queue_id"],
                    queue_offset=result["queue_offset"],
                    key=key_for(prefix, n),
                    digest=digest(b),
                    msg_id=result["msg_id"],
                    via="rest",
                )
            )
    return reply


def cairn_topic(kafka_topic: str) -> str:
    """The Cairn name of a Kafka topic (README "Topic and group names")."""
    return kafka_topic.replace(".", "|")


def kafka_producer(bootstrap: str, **conf: Any) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            # Batches well under the suite's 256 KiB segments (a batch must fit one segment:
            # librdkafka's default of 1 MB would be refused with MESSAGE_TOO_LARGE).
            "batch.size": 65536,
            "log_level": 2,  # librdkafka's own connection-refused lines: the verdict says more
            **conf,
        }
    )


def kafka_ack_callback(ledger: Ledger, errors: list[str]) -> Callable[[Any, Any], None]:
    """A delivery callback that records acknowledged records (by partition and offset)."""

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
            return
        ledger.add(
            Ack(
                topic=cairn_topic(msg.topic()),
                queue_id=msg.partition(),
                queue_offset=msg.offset(),
                key=msg.key().decode(),
                digest=digest(msg.value()),
                via="kafka",
            )
        )

    return delivered


def produce_kafka(
    bootstrap: str,
    ledger: Ledger,
    topic: str,
    prefix: str,
    start: int,
    count: int,
    *,
    partitions: int,
    key_span: int = KEY_SPAN,
    conf: Mapping[str, Any] | None = None,
) -> int:
    """Produce records ``start .. start+count`` (keyed, record ``n`` to partition
    ``n % partitions``) with an idempotent confluent-kafka producer; every delivery report
    goes into ``ledger``. One partition after the other, each flushed before the next, so
    that the CommitLog holds the records in the same order in every session (a seed then
    picks the same record). Returns the next ``n``."""
    errors: list[str] = []
    producer = kafka_producer(bootstrap, **(conf or {}))
    callback = kafka_ack_callback(ledger, errors)
    for partition in range(partitions):
        for n in range(start, start + count):
            if n % partitions != partition:
                continue
            while True:
                try:
                    producer.produce(
                        topic,
                        key=key_for(prefix, n, key_span).encode(),
                        value=body_for(prefix, n),
                        partition=partition,
                        on_delivery=callback,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        left = producer.flush(60)
        assert left == 0 and not errors, f"kafka produce: {left} undelivered, errors {errors[:3]}"
    return start + count


def create_kafka_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions)]).values():
        future.result(20)


# --- reading back -----------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """A message as the broker returned it."""

    topic: str
    queue_id: int
    queue_offset: int
    digest: str
    phys_offset: int
    store_size: int
    keys: tuple[str, ...]

    @property
    def where(self) -> tuple[str, int, int]:
        return (self.topic, self.queue_id, self.queue_offset)


def _served(m: Mapping[str, Any]) -> Served:
    raw = m["body"]
    body = base64.b64decode(raw) if m.get("body_encoding") == "base64" else raw.encode()
    return Served(
        topic=m["topic"],
        queue_id=m["queue_id"],
        queue_offset=m["queue_offset"],
        digest=digest(body),
        phys_offset=m["commitlog_offset"],
        store_size=m["store_size"],
        keys=tuple(m.get("keys") or ()),
    )


def read_queue(
    http: Http, topic: str, queue_id: int, first: int, last: int
) -> tuple[dict[int, Served], list[str]]:
    """Pull ``topic``/``queue_id`` from offset ``first`` until past ``last``: what was served
    at each offset, and what went wrong (HTTP errors, a pull that did not advance)."""
    served: dict[int, Served] = {}
    errors: list[str] = []
    offset = first
    for _ in range(10_000):
        if offset > last:
            break
        reply = http.api(
            "GET",
            f"/topics/{quote_topic(topic)}/messages",
            queue_id=queue_id,
            offset=offset,
            limit=PAGE,
            body_encoding="base64",
        )
        if reply.status != 200:
            errors.append(
                f"pull {topic}/{queue_id}@{offset}: HTTP {reply.status} {reply.text[:200]}"
            )
            break
        for m in reply.body["messages"]:
            s = _served(m)
            served.setdefault(s.queue_offset, s)
        next_offset = reply.body.get("next_offset", offset)
        if next_offset <= offset:
            if not reply.body["messages"]:
                status = reply.body.get("status")
                errors.append(
                    f"pull {topic}/{queue_id}@{offset}: {status}, next_offset {next_offset} "
                    f"(queue {reply.body.get('min_offset')}..{reply.body.get('max_offset')})"
                )
            break
        offset = next_offset
    return served, errors


def read_queues(http: Http, ledger: Ledger) -> tuple[dict[tuple[str, int, int], Served], list[str]]:
    """Every queue of the ledger from its first to its last acknowledged offset."""
    served: dict[tuple[str, int, int], Served] = {}
    errors: list[str] = []
    for (topic, queue_id), indexes in sorted(ledger.by_queue().items()):
        offsets = [ledger.acks[i].queue_offset for i in indexes]
        got, errs = read_queue(http, topic, queue_id, min(offsets), max(offsets))
        errors += errs
        for offset, s in got.items():
            served[(topic, queue_id, offset)] = s
    return served, errors


def query_keys(
    http: Http, keys: Iterable[tuple[str, str]], threads: int = 4
) -> tuple[dict[tuple[str, str], list[Served]], list[str]]:
    """A key query per (topic, key), ``threads`` at a time."""

    def one(tk: tuple[str, str]) -> tuple[tuple[str, str], list[Served] | None, str]:
        topic, key = tk
        reply = http.api(
            "GET",
            f"/topics/{quote_topic(topic)}/messages",
            key=key,
            limit=64,
            body_encoding="base64",
        )
        if reply.status != 200:
            return tk, None, f"key query {topic} {key}: HTTP {reply.status} {reply.text[:200]}"
        return tk, [_served(m) for m in reply.body["messages"]], ""

    found: dict[tuple[str, str], list[Served]] = {}
    errors: list[str] = []
    with ThreadPoolExecutor(threads) as pool:
        for tk, messages, error in pool.map(one, list(keys)):
            if messages is not None:
                found[tk] = messages
            if error:
                errors.append(error)
    return found, errors


# --- what the broker reports ------------------------------------------------------------

_SEGMENT_NAME = re.compile(r"^\d{20}$")
_START_KEYS = (
    "phys_offset",
    "commitlog_offset",
    "start_offset",
    "from_offset",
    "start",
    "offset",
    "begin",
)
_POSITION_KEYS = ("position", "pos", "file_position", "file_offset")
_LENGTH_KEYS = ("length", "size", "bytes", "len")
_END_KEYS = ("end_offset", "end", "to_offset", "stop")


def _first_int(node: Mapping[str, Any], names: Iterable[str]) -> int | None:
    for name in names:
        value = node.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _segment_base(file: Any) -> int | None:
    if not isinstance(file, str):
        return None
    name = Path(file).name
    return int(name) if _SEGMENT_NAME.match(name) else None


def reported_ranges(node: Any, file: Any = None) -> list[tuple[int, int]]:
    """CommitLog byte ranges ``[start, end)`` named anywhere in a report or problem detail.

    Accepted shapes (any nesting): an absolute start (``phys_offset``, ``commitlog_offset``,
    ``start_offset``, ``start``, ``offset`` ...) or a ``position`` inside a segment named by
    ``file``/``segment`` (a 20-digit CommitLog file name), with a ``length``/``size`` or an
    ``end``/``end_offset``.
    """
    out: list[tuple[int, int]] = []
    if isinstance(node, Mapping):
        file = node.get("file") or node.get("segment") or node.get("path") or file
        start = _first_int(node, _START_KEYS)
        if start is None:
            base, position = _segment_base(file), _first_int(node, _POSITION_KEYS)
            if base is not None and position is not None:
                start = base + position
        if start is not None:
            length, end = _first_int(node, _LENGTH_KEYS), _first_int(node, _END_KEYS)
            if length is not None and length > 0:
                out.append((start, start + length))
            elif end is not None and end > start:
                out.append((start, end))
        for value in node.values():
            out += reported_ranges(value, file)
    elif isinstance(node, list):
        for value in node:
            out += reported_ranges(value, file)
    return out


@dataclass
class HealthView:
    """The broker's health surface at one moment, and the store's own records of it."""

    status_health: dict[str, Any] | None  # GET /api/v1/status ["health"]; None: not there
    healthz: dict[str, Any] | None  # GET /healthz
    health_file: dict[str, Any] | None  # <store>/health.json
    quarantine_files: list[str]  # names under <store>/quarantine/
    quarantine_reports: list[Any]  # every parsable JSON document under it

    @classmethod
    def read(cls, broker: Broker | None, store: Path) -> HealthView:
        status_health = healthz = None
        if broker is not None and broker.alive():
            reply = broker.http.api("GET", "/status")
            if reply.status == 200 and isinstance(reply.body, dict):
                health = reply.body.get("health")
                status_health = health if isinstance(health, dict) else None
            reply = broker.http.call("GET", "/healthz")
            healthz = reply.body if isinstance(reply.body, dict) else None
        return cls(status_health, healthz, *_store_health(store))

    def problems(self) -> list[dict[str, Any]]:
        """Unacknowledged problems: the API's, and any in health.json it did not show."""
        seen: dict[str, dict[str, Any]] = {}
        if self.status_health is not None:
            for p in self.status_health.get("problems") or []:
                seen[str(p.get("id"))] = p
        for p in (self.health_file or {}).get("problems") or []:
            if p.get("acknowledged_ms") is None:
                seen.setdefault(str(p.get("id")), p)
        return list(seen.values())

    def conditions(self) -> list[dict[str, Any]]:
        return list((self.status_health or {}).get("conditions") or [])

    def ranges(self) -> list[tuple[int, int]]:
        return reported_ranges([self.problems(), self.quarantine_reports])

    def quarantined(self) -> bool:
        return bool(self.quarantine_files) or any(
            "quarantin" in str(p.get("kind", "")) for p in self.problems()
        )

    def text(self) -> str:
        return json.dumps([self.problems(), self.quarantine_reports, self.quarantine_files])

    def mentions(self, *needles: str) -> bool:
        text = self.text()
        return any(n and n in text for n in needles)

    def summary(self) -> str:
        problems = [f"{p.get('kind')}: {p.get('summary')}" for p in self.problems()]
        conditions = [f"{c.get('kind')}: {c.get('summary')}" for c in self.conditions()]
        return (
            f"/healthz status {(self.healthz or {}).get('status')!r}; "
            f"/api/v1/status health {'present' if self.status_health is not None else 'ABSENT'}; "
            f"problems {problems or 'none'}; conditions {conditions or 'none'}; "
            f"quarantine files {self.quarantine_files or 'none'}"
        )


def _store_health(store: Path) -> tuple[dict[str, Any] | None, list[str], list[Any]]:
    try:
        health_file = json.loads((store / "health.json").read_text())
    except (OSError, ValueError):
        health_file = None
    quarantine = store / "quarantine"
    files: list[str] = []
    reports: list[Any] = []
    if quarantine.is_dir():
        for path in sorted(quarantine.rglob("*")):
            if not path.is_file():
                continue
            files.append(str(path.relative_to(quarantine)))
            if path.stat().st_size < 1 << 20:
                try:
                    reports.append(json.loads(path.read_text()))
                except (UnicodeDecodeError, ValueError):
                    pass
    return health_file, files, reports


def wait_settled(broker: Broker, timeout_s: float = SETTLE_TIMEOUT_S) -> list[str]:
    """Wait until reput has dispatched everything and no work in progress is reported (a
    health condition with a ``progress``, or of a ``rebuild`` kind: derived files being
    rebuilt). A condition that lasts (a full disk) is not waited for. Returns what did not
    settle in time (empty when settled)."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        reply = broker.http.api("GET", "/status")
        if reply.status == 200:
            behind = reply.body.get("dispatch_behind_bytes", 0)
            health = reply.body.get("health")
            conditions = health.get("conditions", []) if isinstance(health, dict) else []
            working = [
                c
                for c in conditions
                if c.get("progress") is not None or "rebuild" in str(c.get("kind", ""))
            ]
            if not behind and not working:
                return []
            last = f"dispatch behind {behind} bytes, conditions {working}"
        else:
            last = f"GET /api/v1/status: HTTP {reply.status}"
        time.sleep(0.1)
    return [f"not settled within {timeout_s:.0f} s: {last}"]


# --- python -m mqcore check ---------------------------------------------------------------


@dataclass
class CheckResult:
    code: int
    ok: bool
    defect_count: int
    defects: list[str]
    notes: list[str]
    stderr: str
    stdout: str = ""

    def mentions(self, needle: str) -> bool:
        """Whether the report (JSON, every field) or stderr names ``needle`` (lower case)."""
        return needle in self.stdout.lower() or needle in self.stderr.lower()

    def summary(self) -> str:
        return (
            f"exit {self.code}, ok={self.ok}, {self.defect_count} defects "
            f"{self.defects[:3]}{' ' + self.stderr.strip()[:200] if self.stderr.strip() else ''}"
        )


def run_check(store: Path) -> CheckResult:
    """``python -m mqcore check --json`` on a stopped store."""
    done = subprocess.run(
        [sys.executable, "-m", "mqcore", "check", str(store), "--json", "--quiet"],
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=180,
    )
    try:
        report = json.loads(done.stdout)
    except ValueError:
        report = {}
    return CheckResult(
        code=done.returncode,
        ok=done.returncode == 0 and bool(report.get("ok")),
        defect_count=int(report.get("defect_count", -1)),
        defects=list(report.get("defects") or []),
        notes=list(report.get("notes") or []),
        stderr=done.stderr,
        stdout=done.stdout,
    )


# --- the verdict --------------------------------------------------------------------------


@dataclass
class Fault:
    """What a run did to the store, for the verdict and the failure message.

    ``destroyed``: acks whose own CommitLog bytes the fault changed or removed (they may be
    unreadable if the broker reports them). ``hit``: acks whose derived entries (a unit, an
    index entry) the fault changed; they must stay readable. ``expect_report``: True when
    the broker must report a problem (data destroyed, a damaged file it must notice).
    ``report_by_file``: a report naming one of ``files`` covers the destroyed acks (a
    truncation: the bytes are gone, only the file and length can be reported).
    """

    name: str
    seed: int
    description: str = ""
    files: list[str] = field(default_factory=list)
    destroyed: set[int] = field(default_factory=set)
    hit: set[int] = field(default_factory=set)
    expect_report: bool = False
    report_by_file: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    """One run's outcome: the counts of the results table and every failed rule."""

    fault: str
    seed: int
    acked: int = 0
    intact: int = 0
    lost: list[str] = field(default_factory=list)
    corrupted: list[str] = field(default_factory=list)
    unfindable: list[str] = field(default_factory=list)  # readable, but not found by key
    reported: int = 0  # destroyed by the fault and reported (quarantined)
    repaired: int = 0  # hit by the fault, readable, and the broker reported the repair
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0
    description: str = ""
    health: HealthView | None = None
    timing: str = ""

    @property
    def passed(self) -> bool:
        return not self.failures

    def fail(self, text: str) -> None:
        self.failures.append(text)

    def row(self, test_id: str = "") -> dict[str, Any]:
        return {
            "fault": self.fault,
            "seed": self.seed,
            "acked": self.acked,
            "lost": len(self.lost),
            "corrupted_served": len(self.corrupted),
            "key_missing": len(self.unfindable),
            "repaired": self.reported + self.repaired,
            "seconds": round(self.seconds or time.monotonic() - self.started, 2),
            "passed": self.passed,
            "test": test_id,
            "failures": self.failures[:5],
            "description": self.description,
            "notes": [n[:300] for n in self.notes[:6]],
            "timing": self.timing,
        }

    def message(self, log_tail: str = "") -> str:
        lines = [
            f"fault {self.fault} seed {self.seed}: {self.description}",
            f"acked {self.acked}, intact {self.intact}, lost {len(self.lost)}, "
            f"corrupted-served {len(self.corrupted)}, not found by key {len(self.unfindable)}, "
            f"quarantined {self.reported}, repaired {self.repaired}",
            *(f"FAIL: {f}" for f in self.failures),
            *(f"  lost: {x}" for x in self.lost[:8]),
            *(f"  corrupted: {x}" for x in self.corrupted[:8]),
            *(f"  not found by key: {x}" for x in self.unfindable[:8]),
            *(f"  note: {n}" for n in self.notes[:8]),
            f"timing: {self.timing}",
        ]
        if self.health is not None:
            lines.append(f"health: {self.health.summary()}")
        if log_tail:
            lines.append("broker log (tail):\n" + log_tail)
        return "\n".join(lines)

    def absorb(self, other: Verdict, phase: str) -> None:
        """Take in the outcome of one phase of a multi-phase run (its failures prefixed with
        the phase): a message lost in any phase counts once."""
        self.failures += [f"{phase}: {f}" for f in other.failures]
        self.notes += [f"{phase}: {n}" for n in other.notes[:5]]
        self.lost = _once(self.lost + other.lost)
        self.corrupted = _once(self.corrupted + other.corrupted)
        self.unfindable = _once(self.unfindable + other.unfindable)
        self.acked = max(self.acked, other.acked)
        self.intact = other.intact
        self.reported = max(self.reported, other.reported)
        self.repaired = max(self.repaired, other.repaired)
        self.health = other.health or self.health
        self.timing = other.timing or self.timing

    # -- after the broker stopped --------------------------------------------------------

    def check_store(self, store: Path) -> CheckResult:
        """Run ``mqcore check`` on the stopped store and hold it to what the broker said:
        it never calls a store clean that lost or corrupted acknowledged messages; it shows
        a quarantine the broker reported; and it finds nothing the broker did not report."""
        result = run_check(store)
        health = HealthView.read(None, store)
        broker_reported = bool(health.problems()) or health.quarantined()
        if (self.lost or self.corrupted or self.unfindable) and result.ok:
            self.fail(
                f"mqcore check says the store is clean although {len(self.lost)} acknowledged "
                f"messages are lost, {len(self.corrupted)} served corrupted and "
                f"{len(self.unfindable)} not found by key"
            )
        if health.quarantined() and result.ok and not result.mentions("quarantin"):
            self.fail("the broker quarantined data but mqcore check reports nothing about it")
        damage = self.lost or self.corrupted or self.unfindable
        if not broker_reported and not damage and not result.ok:
            self.fail(f"mqcore check finds defects the broker never reported: {result.summary()}")
        if result.code not in (0, 1):
            self.fail(f"mqcore check failed to run: {result.summary()}")
        return result


def _once(entries: list[str]) -> list[str]:
    """One entry per message (entries are "<message label>: <why>")."""
    kept: dict[str, str] = {}
    for entry in entries:
        kept.setdefault(entry.split(": ", 1)[0], entry)
    return list(kept.values())


def verify(
    broker: Broker,
    ledger: Ledger,
    fault: Fault,
    *,
    settle: bool = True,
    settle_timeout_s: float = SETTLE_TIMEOUT_S,
    max_keys: int | None = None,
) -> Verdict:
    """Read every acknowledged message back from the running ``broker`` and hold the health
    surface to account (module docstring). The broker keeps running.

    ``max_keys``: query at most this many keys, every n-th (for ledgers with a key per
    message); the messages of keys not queried are checked by pull only."""
    verdict = Verdict(fault.name, fault.seed, acked=len(ledger), description=fault.description)
    verdict.notes += fault.notes
    if not broker.alive():
        verdict.fail(
            f"the broker is not running (exit code {broker.proc and broker.proc.returncode})"
        )
        verdict.lost = [a.label() for a in ledger.acks]
        verdict.health = HealthView.read(None, broker.store)
        return verdict
    t0 = time.monotonic()
    if settle:
        for problem in wait_settled(broker, settle_timeout_s):
            verdict.fail(problem)
    t1 = time.monotonic()
    by_key = ledger.by_key()
    unchecked: set[tuple[str, str]] = set()
    if max_keys is not None and len(by_key) > max_keys:
        every = -(-len(by_key) // max_keys)
        unchecked = {tk for n, tk in enumerate(sorted(by_key)) if n % every}
        by_key = {tk: v for tk, v in by_key.items() if tk not in unchecked}
        verdict.notes.append(
            f"key queries for {len(by_key)} of {len(by_key) + len(unchecked)} keys"
        )
    try:
        served, pull_errors = read_queues(broker.http, ledger)
        t2 = time.monotonic()
        found, key_errors = query_keys(broker.http, by_key)
        t3 = time.monotonic()
        verdict.timing = f"settle {t1 - t0:.1f} s, pulls {t2 - t1:.1f} s, {len(by_key)} key queries {t3 - t2:.1f} s"
    except OSError as exc:
        verdict.fail(f"the broker stopped answering during the read-back: {exc}")
        served, pull_errors, found, key_errors = {}, [], {}, []
    verdict.notes += (pull_errors + key_errors)[:10]
    health = HealthView.read(broker, broker.store)
    verdict.health = health
    ranges = health.ranges()
    fault_names = [Path(f).name for f in fault.files]

    def reported(a: Ack) -> bool:
        if any(start < a.phys_offset + a.size and a.phys_offset < end for start, end in ranges):
            return True
        return fault.report_by_file and health.mentions(*fault_names)

    keyed: dict[tuple[str, int, int], Served] = {}
    for (topic, _key), messages in found.items():
        for s in messages:
            if s.topic == topic:
                keyed.setdefault(s.where, s)
    key_ok: set[tuple[str, int, int]] = set()
    for (topic, key), indexes in by_key.items():
        returned = {s.where: s for s in found.get((topic, key), ()) if key in s.keys}
        for i in indexes:
            a = ledger.acks[i]
            s = returned.get(a.where)
            if s is not None and s.digest == a.digest:
                key_ok.add(a.where)

    for i, a in enumerate(ledger.acks):
        by_pull = served.get(a.where)
        by_key_msg = keyed.get(a.where)
        wrong = [s for s in (by_pull, by_key_msg) if s is not None and s.digest != a.digest]
        if wrong:
            how = "pull" if by_pull is not None and by_pull.digest != a.digest else "key query"
            verdict.corrupted.append(
                f"{a.label()}: {how} returned a different body (phys {wrong[0].phys_offset})"
            )
            continue
        readable = by_pull is not None
        findable = a.where in key_ok or (a.topic, a.key) in unchecked
        if readable and findable:
            verdict.intact += 1
            if i in fault.hit and (health.problems() or health.quarantined()):
                verdict.repaired += 1
            continue
        if i in fault.destroyed and reported(a):
            verdict.reported += 1
            continue
        if readable:
            verdict.unfindable.append(f"{a.label()}: readable by pull, not found by key")
            continue
        why = "not readable by pull" + ("" if findable else " nor found by key")
        verdict.lost.append(f"{a.label()}: {why}")

    if verdict.lost:
        verdict.fail(f"{len(verdict.lost)} acknowledged messages lost")
    if verdict.unfindable:
        verdict.fail(f"{len(verdict.unfindable)} acknowledged messages not found by key")
    if verdict.corrupted:
        verdict.fail(f"{len(verdict.corrupted)} acknowledged messages served with another body")
    _check_health(verdict, health, fault)
    return verdict


def _check_health(verdict: Verdict, health: HealthView, fault: Fault) -> None:
    problems, conditions = health.problems(), health.conditions()
    status = (health.healthz or {}).get("status")
    if (problems or conditions) and status != "degraded":
        verdict.fail(
            f"/healthz says {status!r} while {len(problems)} unacknowledged problems and "
            f"{len(conditions)} conditions exist"
        )
    if not problems and not conditions and not health.quarantine_files and status == "degraded":
        verdict.notes.append("/healthz says degraded with no problem or condition reported")
    if fault.expect_report:
        if health.status_health is None:
            verdict.fail("GET /api/v1/status has no 'health' object")
        if not problems and not conditions and not health.quarantined():
            verdict.fail(
                "the fault was not reported: no health problem or condition, nothing in "
                f"quarantine/ ({health.summary()})"
            )
        elif status != "degraded":
            verdict.fail(f"/healthz says {status!r} after the fault was reported")


def finish(broker: Broker, verdict: Verdict, *, check: bool = True) -> Verdict:
    """Stop the broker cleanly (it must exit 0), then run ``mqcore check`` on its store."""
    was_alive = broker.alive()
    code = broker.stop()
    if was_alive and code != 0:
        verdict.fail(f"the broker exited with {code} on SIGTERM")
    if check:
        verdict.check_store(broker.store)
    verdict.seconds = round(time.monotonic() - verdict.started, 2)
    return verdict


# --- the results table ----------------------------------------------------------------------


def record_row(row: Mapping[str, Any]) -> None:
    """Append one run's row to ``test-output/faults/results.jsonl``."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with RESULTS_FILE.open("a") as f:
        f.write(json.dumps({**row, "session": SESSION}) + "\n")


#: Rows of this pytest session carry this id (the file keeps earlier sessions' rows).
SESSION = f"{int(time.time())}-{os.getpid()}"


def copy_tree(source: Path, dest: Path) -> Path:
    """A byte-for-byte copy of a stopped broker's data dir (store, database, secret key)."""
    shutil.copytree(source, dest, symlinks=True)
    return dest


# --- load in the background ---------------------------------------------------------------


def big_body(prefix: str, n: int) -> bytes:
    """About 2 KB: fills a disk quickly."""
    return body_for(prefix, n) * 8


class RestLoad(threading.Thread):
    """REST batches in a loop until :meth:`halt`: acknowledged messages go into the ledger;
    replies are counted by status, and a refusal streak (no success since) is timed."""

    def __init__(
        self,
        http: Http,
        ledger: Ledger,
        topic: str,
        prefix: str,
        *,
        queues: int,
        batch: int = 50,
        body: Callable[[str, int], bytes] = body_for,
        first: int = 0,
    ) -> None:
        super().__init__(daemon=True)
        self.http, self.ledger, self.topic, self.prefix = http, ledger, topic, prefix
        self.queues, self.batch, self.body, self.n = queues, batch, body, first
        self.statuses: dict[int, int] = defaultdict(int)
        self.refusals: list[str] = []
        self.transport_errors = 0
        self.refused_since: float | None = None
        self._halt = threading.Event()

    def halt(self) -> None:
        self._halt.set()
        self.join(60)

    def run(self) -> None:
        while not self._halt.is_set():
            n, self.n = (
                self.n,
                self.n + self.batch,
            )  # a batch that failed may be stored: never reuse
            try:
                reply = send_rest_batch(
                    self.http, self.ledger, self.topic, self.prefix, n, self.batch,
                    queues=self.queues, body=self.body,
                )  # fmt: skip
            except OSError:
                self.transport_errors += 1
                self.refused_since = self.refused_since or time.monotonic()
                self._halt.wait(0.1)
                continue
            self.statuses[reply.status] += 1
            if reply.status == 200:
                self.refused_since = None
            else:
                self.refused_since = self.refused_since or time.monotonic()
                if len(self.refusals) < 5:
                    self.refusals.append(f"{reply.status} {reply.text[:300]}")
                self._halt.wait(0.02)


class KafkaLoad(threading.Thread):
    """Records produced in a loop until :meth:`halt` (then flushed): delivery reports go into
    the ledger; errors are counted by name, and an error streak (no delivery since) is timed.
    ``unique_keys``: every record gets a key of its own (duplicates are then countable)."""

    def __init__(
        self,
        bootstrap: str,
        ledger: Ledger,
        topic: str,
        prefix: str,
        *,
        partitions: int,
        body: Callable[[str, int], bytes] = body_for,
        conf: Mapping[str, Any] | None = None,
        unique_keys: bool = False,
        limit: int | None = None,
        pause_every: int = 0,
        pause_s: float = 0.0,
    ) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.ledger, self.topic, self.prefix = bootstrap, ledger, topic, prefix
        self.partitions, self.body, self.conf = partitions, body, dict(conf or {})
        self.unique_keys, self.limit = unique_keys, limit
        self.pause_every, self.pause_s = pause_every, pause_s
        self.errors: dict[str, int] = defaultdict(int)
        self.error_since: float | None = None
        self.produced = 0
        self.undelivered = 0
        self.fatal = ""
        self.flush_s = 90.0
        self._halt = threading.Event()

    def halt(self, flush_s: float = 90.0) -> None:
        """Stop producing, then wait up to ``flush_s`` for outstanding deliveries (short when
        the broker is gone: they cannot come)."""
        self.flush_s = flush_s
        self._halt.set()
        self.join(flush_s + 30)

    def key(self, n: int) -> str:
        return f"{self.prefix}-u{n}" if self.unique_keys else key_for(self.prefix, n)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors[err.name()] += 1
            self.error_since = self.error_since or time.monotonic()
            if err.fatal():
                self.fatal = str(err)
            return
        self.error_since = None
        self.ledger.add(
            Ack(
                topic=cairn_topic(msg.topic()),
                queue_id=msg.partition(),
                queue_offset=msg.offset(),
                key=msg.key().decode(),
                digest=digest(msg.value()),
                via="kafka",
            )
        )

    def run(self) -> None:
        producer = kafka_producer(self.bootstrap, **self.conf)
        n = 0
        while not self._halt.is_set() and (self.limit is None or n < self.limit):
            try:
                producer.produce(
                    self.topic,
                    key=self.key(n).encode(),
                    value=self.body(self.prefix, n),
                    partition=n % self.partitions,
                    on_delivery=self._delivered,
                )
            except BufferError:
                producer.poll(0.05)
                continue
            n += 1
            self.produced = n
            producer.poll(0)
            if self.pause_every and n % self.pause_every == 0:
                self._halt.wait(self.pause_s)
        self.undelivered = producer.flush(self.flush_s)


# --- processes to kill at a moment ---------------------------------------------------------


class Streamed:
    """A subprocess whose output lines a thread collects, so a test can wait for a line and
    kill the process at a chosen moment after it."""

    def __init__(self, args: list[str], env: Mapping[str, str]) -> None:
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=REPO,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for raw in self.proc.stdout:
                text = raw.decode(errors="replace").rstrip()
                self.lines.append((time.monotonic() - self.started, text))

    def seen(self, text: str) -> float | None:
        """When ``text`` first appeared (seconds after the start), or None."""
        return next((t for t, line in list(self.lines) if text in line), None)

    def wait_for(self, text: str, timeout_s: float) -> float | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            at = self.seen(text)
            if at is not None or self.proc.poll() is not None:
                return at if at is not None else self.seen(text)
            time.sleep(0.005)
        return None

    def kill(self) -> bool:
        """SIGKILL; False if it had exited already."""
        if self.proc.poll() is not None:
            self.finish(5)
            return False
        self.proc.send_signal(signal.SIGKILL)
        self.finish(10)
        return True

    def finish(self, timeout_s: float) -> int:
        code = self.proc.wait(timeout_s)
        self._reader.join(5)
        return code

    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)


def holds_store_lock(pid: int, store: Path) -> bool:
    """Whether process ``pid`` holds the store's writer lock (``<store>/lock``, a POSIX record
    lock): read from ``/proc/locks``, so watching never disturbs the broker."""
    try:
        inode = (store / "lock").stat().st_ino
        table = Path("/proc/locks").read_text()
    except OSError:
        return False
    for line in table.splitlines():
        fields = [f for f in line.split() if f != "->"]
        if len(fields) >= 6 and fields[4] == str(pid) and fields[5].endswith(f":{inode}"):
            return True
    return False
