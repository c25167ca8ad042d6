"""Idempotent producers across restarts of a real broker process (``manage.py runbroker``):
clean stops and kill -9, under both flush modes. Nothing is stored twice, no acknowledged
batch is lost.

The raw client (``broker_process.RawClient``) sends the very same Produce twice, with the
same producer id, epoch and sequence, as a client's retry does; the real clients
(kafka-python, confluent-kafka with ``enable.idempotence``) retry on their own while the
broker is killed under them.
"""

from __future__ import annotations

import gc
import random
import socket
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from kafka_listener.producer_files import load_files
from kafka_listener.producer_journal import Batch

from .broker_process import BrokerProcess, RawClient, connect, idempotent_batch

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TOPIC = "orders"


def batch_values(seq: int, count: int = 5) -> list[bytes]:
    return [b"seq-%06d-%d" % (seq, i) for i in range(count)]


def journalled(broker: BrokerProcess, seq: int) -> Batch | None:
    """The BATCH entry of sequence ``seq`` in the broker's journal, if written yet."""
    entries = load_files(broker.store / "kafka" / "producers").entries
    return next((e for e in entries if isinstance(e, Batch) and e.first_sequence == seq), None)


@pytest.fixture(params=["async", "sync"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    b = BrokerProcess(tmp_path / "data", CAIRN_FLUSH=request.param).start()
    client = connect(b)
    client.create_topic(TOPIC)
    client.close()
    yield b
    b.stop()


def test_retries_after_a_clean_stop_and_after_kill_9_at_the_journal_and_after_the_ack(
    broker: BrokerProcess,
) -> None:
    client = connect(broker)
    pid, epoch = client.init_producer_id()
    acked: dict[int, int] = {
        0: client.produce(TOPIC, 0, idempotent_batch(pid, epoch, 0, batch_values(0)))["base_offset"]
    }

    # 1. clean stop, then the retry of the last batch
    client.close()
    assert broker.stop() == 0
    broker.start()
    client = connect(broker)
    again = client.produce(TOPIC, 0, idempotent_batch(pid, epoch, 0, batch_values(0)))
    assert (again["error_code"], again["base_offset"]) == (0, acked[0])

    # 2. kill -9 once the BATCH entry is in the journal, before the ack is read
    client.send_produce(TOPIC, 0, idempotent_batch(pid, epoch, 5, batch_values(5)))
    deadline = time.monotonic() + 30
    while (entry := journalled(broker, 5)) is None:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    broker.kill()
    client.close()
    broker.start()
    client = connect(broker)
    retry = client.produce(TOPIC, 0, idempotent_batch(pid, epoch, 5, batch_values(5)))
    assert (retry["error_code"], retry["base_offset"]) == (0, entry.base_offset)
    acked[5] = entry.base_offset

    # 3. kill -9 right after the ack
    reply = client.produce(TOPIC, 0, idempotent_batch(pid, epoch, 10, batch_values(10)))
    broker.kill()
    client.close()
    broker.start()
    client = connect(broker)
    retry = client.produce(TOPIC, 0, idempotent_batch(pid, epoch, 10, batch_values(10)))
    assert (retry["error_code"], retry["base_offset"]) == (0, reply["base_offset"])
    acked[10] = reply["base_offset"]

    # every batch once, at its acknowledged offset; new producer ids above the old one
    stored = client.fetch_all(TOPIC)
    assert stored == [
        (acked[seq] + i, value) for seq in (0, 5, 10) for i, value in enumerate(batch_values(seq))
    ]
    assert client.init_producer_id()[0] > pid
    client.close()


def test_kill_9_at_random_moments_never_duplicates_nor_loses(broker: BrokerProcess) -> None:
    """A producer sends batch after batch (the same batch again after a failure: a
    retry) while the broker is killed at random moments, 4 times."""
    rng = random.Random(17)
    acked: dict[int, int] = {}  # sequence -> acknowledged base offset
    state = {"seq": 0, "client": connect(broker), "pid": (0, 0)}
    state["pid"] = state["client"].init_producer_id()
    stop = threading.Event()
    errors: list[BaseException] = []
    retries: list[int] = []

    def produce() -> None:
        pid, epoch = state["pid"]
        client: RawClient = state["client"]
        try:
            while not stop.is_set():
                seq = state["seq"]
                try:
                    reply = client.produce(
                        TOPIC, 0, idempotent_batch(pid, epoch, seq, batch_values(seq))
                    )
                except OSError:  # the broker died: reconnect and send the same batch again
                    retries.append(seq)
                    client.close()
                    time.sleep(0.05)
                    client = connect(broker)
                    continue
                assert reply["error_code"] == 0, reply
                acked[seq] = reply["base_offset"]
                state["seq"] = seq + 5
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)
        finally:
            client.close()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    for _ in range(4):
        time.sleep(rng.uniform(0.05, 1.5))
        broker.kill()
        broker.start()
    time.sleep(0.5)
    stop.set()
    producer.join(60)
    assert not errors, errors
    client = connect(broker)
    stored = client.fetch_all(TOPIC)
    client.close()
    values = [v for _, v in stored]
    assert len(values) == len(set(values)), "a batch was stored twice"
    expected = [
        (base + i, v)
        for seq, base in sorted(acked.items())
        for i, v in enumerate(batch_values(seq))
    ]
    assert [r for r in stored if r[1] in {v for _, v in expected}] == expected
    assert len(acked) > 4 and len(retries) >= 4  # every kill caught a batch in flight


# kafka-python leaves the sockets of its failed reconnects to the killed broker unclosed.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_real_idempotent_clients_across_kill_9(broker: BrokerProcess) -> None:
    """kafka-python and confluent-kafka (``enable.idempotence``) produce while the broker
    is killed twice; every acknowledged value is stored, and no value twice."""
    kp_acked, kp_sent, ck_acked, ck_failed = produce_through_kills(broker, kills=2)
    close_failed_connects()
    assert not ck_failed, ck_failed[:3]
    client = connect(broker)
    stored = [v for _, v in client.fetch_all(TOPIC)]
    client.close()
    assert len(stored) == len(set(stored)), "a value was stored twice"
    assert set(kp_acked) <= set(stored) and set(ck_acked) <= set(stored)
    assert len(kp_acked) == kp_sent and len(ck_acked) > 100


def close_failed_connects() -> None:
    """Close the sockets kafka-python leaves behind from its connects to the killed broker
    (never connected; its closed producer's selector still holds them), here rather than
    in whichever test's garbage collection finds them."""
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance asks a lazy object (such as Django's admin
        # site, imported by DRF, whose app is not installed) for __class__, which loads it.
        if not issubclass(type(obj), socket.socket) or obj.fileno() == -1:
            continue
        if obj.family != socket.AF_INET or obj.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            continue
        try:
            obj.getpeername()
        except OSError:
            obj.close()


def produce_through_kills(
    broker: BrokerProcess, kills: int
) -> tuple[list[bytes], int, list[bytes], list[str]]:
    """Both clients send one value each every 2 ms while the broker is killed ``kills``
    times; what kafka-python acknowledged and sent, what confluent-kafka acknowledged and
    failed."""
    from confluent_kafka import Producer

    bootstrap = f"127.0.0.1:{broker.kafka_port}"
    kp = KafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        request_timeout_ms=60_000,
        delivery_timeout_ms=240_000,
    )
    ck = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 240_000,
            "reconnect.backoff.ms": 50,
        }
    )
    ck_acked: list[bytes] = []
    ck_failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        (ck_failed.append(str(err)) if err is not None else ck_acked.append(msg.value()))

    futures: list[tuple[bytes, Any]] = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            kv, cv = b"kp-%07d" % i, b"ck-%07d" % i
            futures.append((kv, kp.send(TOPIC, kv, partition=0)))
            ck.produce(TOPIC, cv, partition=0, on_delivery=delivered)
            ck.poll(0)
            i += 1
            time.sleep(0.002)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    for _ in range(kills):
        time.sleep(1.5)
        broker.kill()
        broker.start()
    time.sleep(1.5)
    stop.set()
    producer.join(30)
    kp.flush(240)
    assert ck.flush(240) == 0
    kp.close()
    return [v for v, f in futures if f.succeeded()], len(futures), ck_acked, ck_failed
