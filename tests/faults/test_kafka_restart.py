"""An idempotent Kafka producer (confluent-kafka, ``enable.idempotence``) keeps producing
while its broker is restarted twice (SIGTERM, or SIGKILL), retrying what was in flight
across each restart. Every record has a key of its own: afterwards a Kafka consumer reads
the whole topic and each acknowledged key must be there exactly once (no duplicate from a
retried batch the broker had stored before the restart), and the ledger must hold over REST.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import Conclude
from tests.faults.harness import (
    Broker,
    BrokerDied,
    Fault,
    KafkaLoad,
    Ledger,
    Verdict,
    copy_tree,
    create_kafka_topic,
    finish,
    verify,
)

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

TOPIC, PARTITIONS = "idem.t", 3
RESTARTS = 2
PRODUCER = {
    "message.timeout.ms": 90_000,  # retries span the restarts
    "linger.ms": 5,
    "retry.backoff.ms": 50,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
}


def consume_all(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int, bytes]]:
    """Every record of ``topic`` (partition, offset, key), read with a Kafka consumer from
    offset 0 up to each partition's high watermark."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fault-counter",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 20)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        records: list[tuple[int, int, bytes]] = []
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + 60
        while len(done) < partitions and time.monotonic() < deadline:
            msg: Any = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                    continue
                raise AssertionError(msg.error())
            records.append((msg.partition(), msg.offset(), msg.key()))
            if msg.offset() + 1 >= ends[msg.partition()]:
                done.add(msg.partition())
        return records
    finally:
        consumer.close()


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_idempotent_producer_across_restarts(
    how: str, fault_template: tuple[Path, str], tmp_path: Path, conclude: Conclude
) -> None:
    seed = 1 if how == "sigterm" else 2
    rng = random.Random(seed)
    template, token = fault_template
    copy_tree(template, tmp_path / "run")
    broker = Broker(tmp_path / "run", token)
    verdict = Verdict(f"kafka-idempotent-restart-{how}", seed)
    ledger = Ledger()
    with broker:
        broker.start()
        create_kafka_topic(broker.bootstrap, TOPIC, PARTITIONS)
        load = KafkaLoad(
            broker.bootstrap, ledger, TOPIC, "idem", partitions=PARTITIONS,
            conf=PRODUCER, unique_keys=True, pause_every=4, pause_s=0.01,
        )  # fmt: skip
        load.start()
        moments = []
        for k in range(RESTARTS):
            delay = rng.uniform(0.3, 1.0)
            time.sleep(delay)
            produced = load.produced
            if how == "sigterm":
                code = broker.stop()
                if code != 0:
                    verdict.fail(f"restart {k}: the broker exited with {code} on SIGTERM")
            else:
                broker.kill()
            moments.append(f"{how} {k} after {delay:.3f} s ({produced} records produced so far)")
            try:
                broker.start()
            except BrokerDied as died:
                verdict.fail(f"restart {k}: the broker did not start again: {died.what}")
                break
        time.sleep(0.5)
        load.halt()
        verdict.description = "; ".join(moments)
        verdict.notes.append(
            f"{load.produced} produced, {len(ledger)} acknowledged, errors {dict(load.errors)}, "
            f"{load.undelivered} undelivered at flush"
        )
        if load.fatal:
            verdict.fail(f"the producer hit a fatal idempotence error: {load.fatal}")
        if load.errors or load.undelivered:
            verdict.fail(
                f"not every record was delivered: errors {dict(load.errors)}, "
                f"{load.undelivered} undelivered"
            )
        if broker.alive():
            count = Counter(key for _, _, key in consume_all(broker.bootstrap, TOPIC, PARTITIONS))
            duplicates = {k.decode(): c for k, c in count.items() if c > 1}
            if duplicates:
                sample = dict(list(duplicates.items())[:5])
                verdict.fail(
                    f"{sum(c - 1 for c in duplicates.values())} duplicate records of "
                    f"{len(duplicates)} keys in the topic (e.g. {sample})"
                )
            missing = [a.key for a in ledger.acks if count[a.key.encode()] == 0]
            if missing:
                verdict.fail(
                    f"{len(missing)} acknowledged keys absent from the topic: {missing[:5]}"
                )
            verdict.absorb(
                verify(broker, ledger, Fault(verdict.fault, seed), max_keys=300), "read back"
            )
        finish(broker, verdict)
    verdict.acked = len(ledger)
    conclude(verdict, broker.log_tail(1500))
