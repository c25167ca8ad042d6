"""Real clients against a listener with ACLs: kafka-python's and confluent-kafka's admin
ACL calls, refusals producers and admins see, topic visibility, and the audit trail.

The listener's accounts store is a StaticAccess that keeps each audit entry's subject.
Until SASL lands, who a connection is comes from the listener's anonymous subject; this
module points it at the subject a test wants (``as_subject``) before the test's clients
connect (each client opens its own connections).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
)
from confluent_kafka.admin import ResourceType as CResourceType

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        NewTopic,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.errors import TopicAuthorizationFailedError

from kafka_listener.handlers import ListenerConfig
from mqcore.access.authorizer import Subject
from mqcore.access.model import AclEntry, Operation, PatternType, Permission, Principal
from mqcore.access.model import ResourceType as RT

from ..harness import RunningListener
from ..test_authorization import RecordingAccess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningListener]:
    config = ListenerConfig(port=0, initial_rebalance_delay_ms=100, anonymous_role="viewer")
    with RunningListener(Path(tmp_path_factory.mktemp("kafka-acl")), config) as r:
        yield r


@pytest.fixture
def access(running: RunningListener) -> RecordingAccess:
    """A fresh accounts store per test (no entries), and connections as the anonymous
    viewer unless the test says otherwise."""
    assert running.listener is not None
    fresh = RecordingAccess()
    running.listener.ctx.access = fresh
    running.listener.anonymous_subject = running.listener.__class__.anonymous_subject.__get__(  # type: ignore[method-assign]
        running.listener
    )
    return fresh


def as_subject(running: RunningListener, user: str | None, role: str | None) -> None:
    """New connections act as ``user`` with ``role`` (the test-only hook)."""
    assert running.listener is not None

    def subject(peer: Any) -> Subject:
        return Subject(user, role, peer.ip if peer is not None else "*", "kafka")

    running.listener.anonymous_subject = subject  # type: ignore[method-assign]


def make_topics(running: RunningListener, *names: str) -> None:
    assert running.broker is not None
    for name in names:
        running.broker.admin.create_topic(name.replace(".", "|"), read_queue_nums=1,
                                    write_queue_nums=1)  # fmt: skip


def confluent_produce(running: RunningListener, topic: str) -> KafkaError | None:
    """Produce one message with librdkafka; the delivery error, or None."""
    producer = Producer({"bootstrap.servers": running.bootstrap, "message.timeout.ms": 5000})
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(10)
    assert outcome, "no delivery report"
    return outcome[0]


# -- ACL administration ----------------------------------------------------------------------


def test_kafka_python_admin_creates_describes_and_deletes_acls(
    running: RunningListener, access: RecordingAccess
) -> None:
    as_subject(running, "root", "admin")
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap)
    try:
        pattern = ResourcePattern(ResourceType.TOPIC, "orders.", ACLResourcePatternType.PREFIXED)
        acl = ACL("User:alice", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, pattern)
        assert admin.create_acls([acl]) == {"succeeded": [acl], "failed": []}
        assert AclEntry(Principal.user("alice"), RT.TOPIC, "orders|", PatternType.PREFIXED,
                        Operation.WRITE, Permission.ALLOW) in access.authorizer().entries  # fmt: skip
        any_topic = ResourcePatternFilter(ResourceType.TOPIC, None, ACLResourcePatternType.ANY)
        wanted = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY, any_topic)
        found, error = admin.describe_acls(wanted)
        assert error.errno == 0 and len(found) == 1
        assert found[0].principal == "User:alice"
        assert found[0].resource_pattern.resource_name == "orders."
        assert found[0].resource_pattern.pattern_type == ACLResourcePatternType.PREFIXED
        ((_, deleted, error),) = admin.delete_acls([wanted])
        assert error.errno == 0 and [d.principal for d in deleted] == ["User:alice"]
        assert access.authorizer().entries == ()
    finally:
        admin.close()
    assert [a[1] for a in access.audited] == ["acl.create", "acl.delete"]


def test_confluent_admin_creates_describes_and_deletes_acls(
    running: RunningListener, access: RecordingAccess
) -> None:
    as_subject(running, "root", "admin")
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    binding = AclBinding(CResourceType.GROUP, "billing.", ResourcePatternType.PREFIXED,
                         "Role:viewer", "*", AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    for future in admin.create_acls([binding]).values():
        future.result(10)
    assert any(e.resource_name == "billing|" for e in access.authorizer().entries)
    everything = AclBindingFilter(CResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    described = admin.describe_acls(everything).result(10)
    assert described == [binding]
    deleted = [f.result(10) for f in admin.delete_acls([everything]).values()]
    assert deleted == [[binding]]
    assert access.authorizer().entries == ()


def test_a_viewer_cannot_manage_acls(running: RunningListener, access: RecordingAccess) -> None:
    admin = AdminClient({"bootstrap.servers": running.bootstrap})  # the anonymous viewer
    binding = AclBinding(CResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:me", "*",
                         AclOperation.ALL, AclPermissionType.ALLOW)  # fmt: skip
    (future,) = admin.create_acls([binding]).values()
    with pytest.raises(Exception) as refused:
        future.result(10)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert access.authorizer().entries == ()


# -- refusals and visibility ---------------------------------------------------------------


def test_a_viewer_cannot_produce_or_delete_topics(
    running: RunningListener, access: RecordingAccess, names: Callable[[str], str]
) -> None:
    topic = names("view")
    make_topics(running, topic)
    producer = KafkaProducer(bootstrap_servers=running.bootstrap, enable_idempotence=False,
                             retries=0, max_block_ms=5000)  # fmt: skip
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(topic, b"v").get(10)
    finally:
        producer.close(5)
    error = confluent_produce(running, topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            admin.delete_topics([topic])
        with pytest.raises(TopicAuthorizationFailedError):
            admin.create_topics([NewTopic(names("new"), 1, 1)])
        assert topic in admin.list_topics()  # viewers describe every topic
    finally:
        admin.close()
    assert running.broker is not None
    assert running.broker.reader.max_offset(topic.replace(".", "|"), 0) == 0
    assert access.audited == []


def test_a_prefixed_allow_writes_orders_but_not_others_and_hides_the_rest(
    running: RunningListener, access: RecordingAccess, names: Callable[[str], str]
) -> None:
    orders, payments = "orders." + names("p"), names("payments")
    make_topics(running, orders, payments)
    access.set_entries([AclEntry(Principal.user("alice"), RT.TOPIC, "orders|",
                                 PatternType.PREFIXED, Operation.WRITE, Permission.ALLOW)])  # fmt: skip
    as_subject(running, "alice", None)
    assert confluent_produce(running, orders) is None
    error = confluent_produce(running, payments)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap)
    try:
        listed = admin.list_topics()
    finally:
        admin.close()
    assert orders in listed and payments not in listed
    assert all(t.startswith("orders.") for t in listed)


def test_a_deny_entry_wins_over_the_operator_role(
    running: RunningListener, access: RecordingAccess, names: Callable[[str], str]
) -> None:
    kept, denied = names("kept"), names("denied")
    make_topics(running, kept, denied)
    access.set_entries([AclEntry(Principal("Role", "operator"), RT.TOPIC,
                                 denied.replace(".", "|"), PatternType.LITERAL,
                                 Operation.WRITE, Permission.DENY)])  # fmt: skip
    as_subject(running, "olga", "operator")
    assert confluent_produce(running, kept) is None
    error = confluent_produce(running, denied)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_changes_over_kafka_are_audited_with_principal_address_and_front_end(
    running: RunningListener, access: RecordingAccess, names: Callable[[str], str]
) -> None:
    topic = names("audited")
    as_subject(running, "olga", "operator")
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        admin.delete_topics([topic])
    finally:
        admin.close()
    store_name = topic.replace(".", "|")
    assert [(a[0], a[1], a[3]) for a in access.audited] == [
        ("User:olga", "topic.create", store_name),
        ("User:olga", "topic.delete", store_name),
    ]
    assert {(s.front_end, s.host) for s in access.subjects} == {("kafka", "127.0.0.1")}
