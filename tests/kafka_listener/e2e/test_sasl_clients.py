"""kafka-python, aiokafka and confluent-kafka with SASL PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512, over plaintext and TLS (a CA and certificates made at test time), against
listeners that require authentication; wrong passwords refused while others are served; a
TLS client certificate's CN as the principal; KIP-368 re-authentication by real clients."""

from __future__ import annotations

import asyncio
import itertools
import logging
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioPartition
from aiokafka.errors import KafkaError as AioKafkaError
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as RdPartition

from cairn import tls
from kafka_listener.handlers import ListenerConfig
from kafka_listener.schemas import ApiKey
from mqcore.access.authorizer import Subject
from mqcore.access.backend import LoginRefused, StaticAccess
from tests.support.certificates import TestCA

from ..harness import RunningListener
from .conftest import eventually

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

pytestmark = pytest.mark.e2e

USERS = {
    "alice": ("operator", ("alice-pw", "alice-token")),
    "bob": ("viewer", ("bob-pw",)),
    "carol": ("operator", ("carol-pw",)),
}
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
_topics = itertools.count()


class CountingAccess(StaticAccess):
    """StaticAccess that counts logins (to see re-authentications and refusals)."""

    logins = 0
    refused = 0

    def authenticate_password(
        self, username: str, secret: str, host: str, front_end: str
    ) -> Subject | LoginRefused:
        result = super().authenticate_password(username, secret, host, front_end)
        self.logins += isinstance(result, Subject)
        self.refused += isinstance(result, LoginRefused)
        return result

    def login_finished(
        self, username: str, host: str, front_end: str, succeeded: bool, mechanism: str
    ) -> Subject | LoginRefused:
        result = super().login_finished(username, host, front_end, succeeded, mechanism)
        self.logins += isinstance(result, Subject)
        self.refused += isinstance(result, LoginRefused)
        return result


@dataclass
class Security:
    """One way to reach a listener: its address, TLS or not, and the CA clients trust."""

    running: RunningListener
    tls: bool
    ca: Path

    def kafka_python(self, mechanism: str | None, user: str, password: str) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap_servers": self.running.bootstrap}
        if mechanism is not None:
            conf |= {
                "sasl_mechanism": mechanism,
                "sasl_plain_username": user,
                "sasl_plain_password": password,
            }
        protocol = ("SASL_" if mechanism else "") + ("SSL" if self.tls else "PLAINTEXT")
        conf["security_protocol"] = protocol
        if self.tls:
            conf["ssl_cafile"] = str(self.ca)
        return conf

    def aiokafka(self, mechanism: str, user: str, password: str) -> dict[str, Any]:
        conf = self.kafka_python(mechanism, user, password)
        if self.tls:
            conf["ssl_context"] = create_ssl_context(cafile=str(conf.pop("ssl_cafile")))
        return conf

    def confluent(self, mechanism: str | None, user: str, password: str) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.running.bootstrap}
        if mechanism is not None:
            conf |= {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
        conf["security.protocol"] = ("sasl_" if mechanism else "") + (
            "ssl" if self.tls else "plaintext"
        )
        if self.tls:
            conf["ssl.ca.location"] = str(self.ca)
        return conf


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(Path(tmp_path_factory.mktemp("ca")))


@pytest.fixture(scope="module")
def access() -> CountingAccess:
    return CountingAccess(users=USERS)


def _listener(
    root: Path, access: StaticAccess, ca: TestCA | None, **config: Any
) -> RunningListener:
    context = None
    if ca is not None:
        files = ca.server("127.0.0.1", "localhost")
        context = tls.kafka_ssl_context(tls.load(files.cert, files.key), ca.path)
    settings = ListenerConfig(port=0, auth="required", initial_rebalance_delay_ms=100, **config)
    return RunningListener(root, settings, access=access, ssl_context=context)


@pytest.fixture(scope="module", params=["plaintext", "tls"])
def security(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    ca: TestCA,
    access: CountingAccess,
) -> Iterator[Security]:
    use_tls = request.param == "tls"
    root = Path(tmp_path_factory.mktemp(request.param))
    with _listener(root, access, ca if use_tls else None) as running:
        yield Security(running, use_tls, ca.path)


def new_topic(running: RunningListener) -> str:
    name = f"sasl-{next(_topics)}"
    assert running.broker is not None
    running.broker.admin.create_topic(name, read_queue_nums=1, write_queue_nums=1)
    return name


def kafka_python_roundtrip(conf: dict[str, Any], topic: str) -> list[bytes]:
    producer = KafkaProducer(**conf)
    producer.send(topic, key=b"k", value=b"over kafka-python").get(10)
    producer.close()
    consumer = KafkaConsumer(enable_auto_commit=False, **conf)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got += [r.value for r in records]
    consumer.close()
    return got


async def aiokafka_roundtrip(conf: dict[str, Any], topic: str) -> list[bytes]:
    producer = AIOKafkaProducer(**conf)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"over aiokafka", key=b"k")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(enable_auto_commit=False, **conf)
    await consumer.start()
    try:
        tp = AioPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                got += [r.value for r in records]
        return got
    finally:
        await consumer.stop()


def confluent_roundtrip(conf: dict[str, Any], topic: str) -> list[bytes]:
    producer = Producer(conf)
    producer.produce(topic, b"over confluent-kafka", b"k")
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([RdPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return got


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python(security: Security, mechanism: str) -> None:
    topic = new_topic(security.running)
    conf = security.kafka_python(mechanism, "alice", "alice-pw")
    assert kafka_python_roundtrip(conf, topic) == [b"over kafka-python"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka(security: Security, mechanism: str) -> None:
    topic = new_topic(security.running)
    conf = security.aiokafka(mechanism, "alice", "alice-token")  # an API token as password
    got = asyncio.run(asyncio.wait_for(aiokafka_roundtrip(conf, topic), 60))
    assert got == [b"over aiokafka"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent(security: Security, mechanism: str) -> None:
    topic = new_topic(security.running)
    conf = security.confluent(mechanism, "alice", "alice-pw")
    assert confluent_roundtrip(conf, topic) == [b"over confluent-kafka"]


# kafka-python's constructor raises with its network thread and socket pair left open, so it
# runs in a child process (the leak would fail a later test of this one).
KAFKA_PYTHON_REFUSED = """
import sys, warnings
warnings.simplefilter("ignore")
from kafka import KafkaProducer
try:
    KafkaProducer(**eval(sys.argv[1]), bootstrap_timeout_ms=1500)
except Exception as exc:
    print(type(exc).__name__)
    sys.exit(3)
"""


@pytest.mark.slow  # ~4 s each: a child process, librdkafka's retries
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_wrong_password_is_refused_by_every_client(
    security: Security, access: CountingAccess, mechanism: str
) -> None:
    refused = access.refused
    conf = repr(security.kafka_python(mechanism, "alice", "wrong"))
    child = subprocess.run(
        [sys.executable, "-c", KAFKA_PYTHON_REFUSED, conf], capture_output=True, timeout=60
    )
    assert child.returncode == 3, child.stderr.decode()[-2000:]
    assert access.refused > refused
    refused = access.refused

    async def aio() -> None:
        producer = AIOKafkaProducer(**security.aiokafka(mechanism, "alice", "wrong"))
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(AioKafkaError):
        asyncio.run(asyncio.wait_for(aio(), 30))
    assert access.refused > refused
    refused = access.refused
    producer = Producer(security.confluent(mechanism, "nobody", "wrong"))
    with pytest.raises(KafkaException):
        producer.list_topics(timeout=2)
    assert access.refused > refused
    # The listener goes on serving the right password.
    topic = new_topic(security.running)
    conf = security.confluent(mechanism, "alice", "alice-pw")
    assert confluent_roundtrip(conf, topic) == [b"over confluent-kafka"]


def test_anonymous_clients_are_refused_under_required(security: Security) -> None:
    reports: list[Any] = []
    producer = Producer({**security.confluent(None, "", ""), "message.timeout.ms": 2000})
    topic = new_topic(security.running)
    producer.produce(topic, b"anonymous", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(10)
    assert len(reports) == 1 and reports[0] is not None  # not delivered
    assert security.running.broker is not None
    assert security.running.broker.store.max_offset(topic, 0) == 0


def test_client_certificate_cn_is_the_principal(tmp_path: Path, ca: TestCA) -> None:
    access = CountingAccess(users=USERS)
    carol = ca.client("carol")
    with _listener(tmp_path, access, ca) as running:
        conf = {
            "bootstrap.servers": running.bootstrap,
            "security.protocol": "ssl",
            "ssl.ca.location": str(ca.path),
            "ssl.certificate.location": str(carol.cert),
            "ssl.key.location": str(carol.key),
        }
        producer = Producer(conf)
        producer.list_topics(timeout=10)
        subjects = running.listener.subjects()  # type: ignore[union-attr]
        assert [(s.user, s.role, s.front_end) for s in subjects] == [("carol", "operator", "kafka")]
        # A certificate of no user leaves the connection unauthenticated: refused.
        stranger = ca.client("mallory")
        other = Producer({**conf, "ssl.certificate.location": str(stranger.cert),
                          "ssl.key.location": str(stranger.key)})  # fmt: skip
        with pytest.raises(KafkaException):
            other.list_topics(timeout=3)
        del producer, other


@pytest.mark.slow  # 3.5 s of producing across several session lifetimes
@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_clients_reauthenticate_within_the_session_lifetime(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, client: str
) -> None:
    access = CountingAccess(users=USERS)
    caplog.set_level(logging.INFO, logger="kafka_listener")
    with _listener(tmp_path, access, None, reauth_ms=1000) as running:
        topic = new_topic(running)
        sent = 0
        if client == "kafka-python":
            producer = KafkaProducer(**Security(running, False, tmp_path).kafka_python(
                "SCRAM-SHA-256", "alice", "alice-pw"))  # fmt: skip
            deadline = time.monotonic() + 3.5
            while time.monotonic() < deadline:
                producer.send(topic, b"m").get(10)
                sent += 1
                time.sleep(0.05)
            producer.close()
        else:
            rd = Producer(
                Security(running, False, tmp_path).confluent("PLAIN", "alice", "alice-pw")
            )
            deadline = time.monotonic() + 3.5
            while time.monotonic() < deadline:
                rd.produce(topic, b"m")
                assert rd.flush(10) == 0
                sent += 1
                time.sleep(0.05)
        assert running.broker is not None
        eventually(lambda: running.broker.store.max_offset(topic, 0) == sent, what="all stored")  # type: ignore[union-attr]
    assert "expired" not in caplog.text  # nobody was cut off for not re-authenticating
    assert access.logins >= 4  # first logins, then about one a second


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_v0_handshakes_with_bare_tokens(tmp_path: Path, mechanism: str) -> None:
    # Offered only SaslHandshake v0 (as brokers before Kafka 1.0), kafka-python and aiokafka
    # send their SASL tokens bare, without Kafka headers.
    with _listener(tmp_path, CountingAccess(users=USERS), None) as running:
        assert running.listener is not None
        running.listener.ctx.versions[ApiKey.SASL_HANDSHAKE] = (0, 0)
        security = Security(running, False, tmp_path)
        topic = new_topic(running)
        conf = security.kafka_python(mechanism, "alice", "alice-pw")
        assert kafka_python_roundtrip(conf, topic) == [b"over kafka-python"]
        conf = security.aiokafka(mechanism, "alice", "alice-pw")
        got = asyncio.run(asyncio.wait_for(aiokafka_roundtrip(conf, new_topic(running)), 60))
        assert got == [b"over aiokafka"]


@pytest.mark.slow  # waits out a session lifetime
def test_a_client_without_reauthentication_is_cut_off_and_reconnects(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # aiokafka does not implement KIP-368: its expired connection is closed at its next
    # request (logged), and its retry logs in again on a new one.
    access = CountingAccess(users=USERS)
    caplog.set_level(logging.INFO, logger="kafka_listener")
    with _listener(tmp_path, access, None, reauth_ms=1000) as running:
        topic = new_topic(running)
        conf = Security(running, False, tmp_path).aiokafka("PLAIN", "alice", "alice-pw")

        async def produce_twice() -> None:
            producer = AIOKafkaProducer(**conf, retry_backoff_ms=50)
            await producer.start()
            try:
                await producer.send_and_wait(topic, b"first")
                await asyncio.sleep(1.5)
                await producer.send_and_wait(topic, b"after expiry")
            finally:
                await producer.stop()

        logins = access.logins
        asyncio.run(asyncio.wait_for(produce_twice(), 60))
        assert running.broker is not None
        assert running.broker.store.max_offset(topic, 0) == 2
    assert "SASL session expired without re-authentication" in caplog.text
    assert access.logins > logins + 1


def test_the_logged_in_user_is_who_authorization_sees(security: Security) -> None:
    # bob is a viewer: his SASL login may read but not write; alice (operator) may write.
    topic = new_topic(security.running)
    reports: list[Any] = []
    viewer = Producer({**security.confluent("SCRAM-SHA-256", "bob", "bob-pw"),
                       "message.timeout.ms": 3000, "retries": 0})  # fmt: skip
    viewer.produce(topic, b"from a viewer", on_delivery=lambda err, msg: reports.append(err))
    viewer.flush(10)
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    conf = security.confluent("SCRAM-SHA-256", "alice", "alice-pw")
    assert confluent_roundtrip(conf, topic) == [b"over confluent-kafka"]
