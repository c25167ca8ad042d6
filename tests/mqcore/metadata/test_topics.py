"""Topics and topics.json (spec 8.2, 8.7, 11)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import ConflictError, NotFoundError, ValidationError
from mqcore.metadata import checked_file
from mqcore.metadata.jsonfile import loads_fastjson
from mqcore.metadata.topics import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    TopicConfig,
    TopicConfigManager,
    is_inherited,
    is_readable,
    is_writeable,
)
from tests.mqcore.metadata.support import NOW_MS, fixture_text, install_fixture

# spec 8.2: topic -> (read/write queues, perm) for DefaultCluster / broker-a, defaults.
SYSTEM_TOPICS = {
    "SELF_TEST_TOPIC": (1, 6),
    "TBW102": (8, 7),
    "BenchmarkTest": (1024, 6),
    "DefaultCluster": (16, 7),
    "broker-a": (1, 7),
    "OFFSET_MOVED_EVENT": (1, 6),
    "SCHEDULE_TOPIC_XXXX": (18, 6),
    "DefaultCluster_REPLY_TOPIC": (1, 6),
    "rmq_sys_REVIVE_LOG_DefaultCluster": (8, 6),
    "rmq_sys_SYNC_BROKER_MEMBER_broker-a": (1, 1),
    "RMQ_SYS_TRANS_HALF_TOPIC": (1, 6),
    "RMQ_SYS_TRANS_OP_HALF_TOPIC": (1, 6),
    "rmq_sys_wheel_timer": (1, 6),
}


def manager(config_dir: Path, clock: FakeClock, **options: Any) -> TopicConfigManager:
    topics = TopicConfigManager(config_dir, clock, **options)
    topics.load()
    return topics


def file_state(config_dir: Path) -> Any:
    return loads_fastjson((config_dir / "topics.json").read_text())


# -- perm bits -----------------------------------------------------------------------------------


def test_perm_helpers() -> None:
    assert (PERM_READ, PERM_WRITE, PERM_INHERIT) == (4, 2, 1)
    assert is_readable(6) and is_writeable(6) and not is_inherited(6)
    assert is_inherited(7) and not is_readable(2) and not is_writeable(4)


# -- system topics -------------------------------------------------------------------------------


def test_system_topics_exist_with_spec_defaults(config_dir: Path, clock: FakeClock) -> None:
    topics = TopicConfigManager(config_dir, clock)
    assert [t.topic_name for t in topics.list()] == list(SYSTEM_TOPICS)
    for name, (queues, perm) in SYSTEM_TOPICS.items():
        config = topics.require(name)
        assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (
            queues,
            queues,
            perm,
        )
        assert config.topic_filter_type == "SINGLE_TAG"
        assert (config.topic_sys_flag, config.order, config.attributes) == (0, False, {})
        assert topics.is_system_topic(name)
    assert not config_dir.exists()  # construction writes nothing


def test_system_topics_follow_the_options(config_dir: Path, clock: FakeClock) -> None:
    topics = TopicConfigManager(
        config_dir,
        clock,
        cluster_name="c1",
        broker_name="b1",
        auto_create_topic_enable=False,
        trace_topic_enable=True,
        timer_wheel_enable=False,
        cluster_topic_enable=False,
        broker_topic_enable=False,
    )
    names = {t.topic_name for t in topics.list()}
    assert "TBW102" not in names and "rmq_sys_wheel_timer" not in names
    assert {"c1", "b1", "c1_REPLY_TOPIC", "RMQ_SYS_TRACE_TOPIC"} <= names
    assert topics.require("c1").perm == PERM_INHERIT
    assert topics.require("b1").perm == PERM_INHERIT
    assert topics.is_system_topic("TBW102")  # reserved even when absent
    assert topics.is_system_topic("rmq_sys_anything")
    assert not topics.is_system_topic("%RETRY%g")


def test_system_topics_cannot_be_deleted_or_created(config_dir: Path, clock: FakeClock) -> None:
    topics = manager(config_dir, clock)
    with pytest.raises(ValidationError) as info:
        topics.delete("SCHEDULE_TOPIC_XXXX")
    assert (info.value.field, info.value.rule) == ("topic_name", "system_topic")
    assert "cannot be deleted" in str(info.value)
    with pytest.raises(ValidationError) as info:
        topics.create(TopicConfig("rmq_sys_mine"))
    assert info.value.rule == "system_topic"
    assert topics.get("SCHEDULE_TOPIC_XXXX") is not None


# -- Java files ----------------------------------------------------------------------------------


def test_java_file_round_trips_byte_for_byte(config_dir: Path, clock: FakeClock) -> None:
    install_fixture(config_dir, "topics.json", "topics.json")
    topics = manager(config_dir, clock)
    order = topics.require("OrderEvents")
    assert order == TopicConfig(
        "OrderEvents",
        8,
        8,
        6,
        "MULTI_TAG",
        0,
        True,
        {"message.type": "FIFO", "queue.type": "SimpleCQ"},
    )
    assert topics.data_version.counter == 12
    assert topics.to_document() == fixture_text("topics.json")
    topics.persist()
    assert (config_dir / "topics.json").read_bytes() == fixture_text("topics.json").encode()


def test_legacy_4x_file_loads_and_gains_the_system_topics(
    config_dir: Path, clock: FakeClock
) -> None:
    install_fixture(config_dir, "topics_legacy_4x.json", "topics.json")
    topics = manager(config_dir, clock)
    assert topics.data_version.counter == 3
    assert topics.data_version.timestamp == 1_500_000_000_000  # the `timestatmp` spelling
    assert topics.require("TopicTest") == TopicConfig("TopicTest", 4, 4)
    names = [t.topic_name for t in topics.list()]
    assert names[:2] == ["TopicTest", "TBW102"]  # file order first
    assert set(SYSTEM_TOPICS) <= set(names)
    topics.update("TopicTest", perm=4)
    written = file_state(config_dir)
    assert written["dataVersion"] == {"counter": 4, "stateVersion": 0, "timestamp": NOW_MS}
    assert written["topicConfigTable"]["TopicTest"]["attributes"] == {}


def test_corrupt_file_falls_back_to_the_backup(config_dir: Path, clock: FakeClock) -> None:
    topics = manager(config_dir, clock)
    topics.create(TopicConfig("A"))
    topics.create(TopicConfig("B"))  # topics.json.bak holds the state with A only
    (config_dir / "topics.json").write_text('{"topicConfigTable":{"X":{"perm":"rw"')
    again = manager(config_dir, clock)
    assert again.get("A") is not None and again.get("B") is None


def test_wrong_shape_in_the_file_counts_as_corrupt(config_dir: Path, clock: FakeClock) -> None:
    topics = manager(config_dir, clock)
    topics.create(TopicConfig("A"))
    topics.create(TopicConfig("B"))
    (config_dir / "topics.json").write_text('{"topicConfigTable":{"B":{"perm":"rw"}}}')
    assert manager(config_dir, clock).get("B") is None


# -- changes -------------------------------------------------------------------------------------


def test_every_change_is_persisted_and_bumps_the_version(
    config_dir: Path, clock: FakeClock
) -> None:
    topics = manager(config_dir, clock)
    clock.advance(10)
    created = topics.create(TopicConfig("Orders", 4, 4, attributes={"queue.type": "SimpleCQ"}))
    assert topics.data_version.counter == 1
    assert file_state(config_dir)["topicConfigTable"]["Orders"]["readQueueNums"] == 4
    assert file_state(config_dir)["dataVersion"]["timestamp"] == NOW_MS + 10

    updated = topics.update("Orders", write_queue_nums=8, perm=4)
    assert updated == TopicConfig("Orders", 4, 8, 4, attributes={"queue.type": "SimpleCQ"})
    assert manager(config_dir, clock).require("Orders") == updated

    assert topics.delete("Orders") == updated
    assert manager(config_dir, clock).get("Orders") is None
    assert topics.data_version.counter == 3
    assert created.topic_name == "Orders"


def test_create_conflict_and_missing_topics(config_dir: Path, clock: FakeClock) -> None:
    topics = manager(config_dir, clock)
    topics.create(TopicConfig("Orders"))
    with pytest.raises(ConflictError):
        topics.create(TopicConfig("Orders", 2, 2))
    with pytest.raises(NotFoundError) as info:
        topics.update("Nope", perm=6)
    assert (info.value.field, info.value.rule) == ("topic_name", "not_found")
    with pytest.raises(NotFoundError):
        topics.delete("Nope")
    assert topics.get("Nope") is None


def test_a_failed_write_changes_nothing(
    config_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = manager(config_dir, clock)

    def disk_full(path: object, data: bytes) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checked_file, "write_temp", disk_full)
    with pytest.raises(OSError):
        topics.create(TopicConfig("Orders"))
    assert topics.get("Orders") is None
    assert topics.data_version.counter == 0


@pytest.mark.parametrize(
    ("config", "field", "rule"),
    [
        (TopicConfig("bad topic"), "topic_name", "pattern"),
        (TopicConfig("标签"), "topic_name", "pattern"),
        (TopicConfig(""), "topic_name", "blank"),
        (TopicConfig("a" * 128), "topic_name", "length"),
        (TopicConfig("%RETRY%" + "a" * 249), "topic_name", "length"),
        (TopicConfig("T", read_queue_nums=0), "read_queue_nums", "range"),
        (TopicConfig("T", write_queue_nums=1025), "write_queue_nums", "range"),
        (TopicConfig("T", perm=8), "perm", "range"),
        (TopicConfig("T", perm=-1), "perm", "range"),
        (TopicConfig("T", topic_filter_type="ALL"), "topic_filter_type", "choice"),
        (TopicConfig("T", topic_sys_flag=4), "topic_sys_flag", "range"),
        (TopicConfig("T", attributes={"queue.type": "Fancy"}), "attributes.queue.type", "choice"),
        (TopicConfig("T", attributes={"reserve.time": "soon"}), "attributes.reserve.time", "range"),
    ],
)
def test_validation_names_field_and_rule(
    config_dir: Path, clock: FakeClock, config: TopicConfig, field: str, rule: str
) -> None:
    topics = manager(config_dir, clock)
    with pytest.raises(ValidationError) as info:
        topics.create(config)
    assert (info.value.field, info.value.rule) == (field, rule)
    assert field.split(".")[0].replace("_", " ").split()[0] in str(info.value).replace("_", " ")
    assert not (config_dir / "topics.json").exists()


def test_long_retry_and_dlq_names_are_allowed(config_dir: Path, clock: FakeClock) -> None:
    topics = manager(config_dir, clock)
    topics.create(TopicConfig("%RETRY%" + "a" * 248))
    topics.create(TopicConfig("%DLQ%" + "a" * 250))
    topics.create(TopicConfig("a" * 127))


def test_update_checks_field_names_and_values(config_dir: Path, clock: FakeClock) -> None:
    topics = manager(config_dir, clock)
    topics.create(TopicConfig("Orders"))
    with pytest.raises(ValidationError) as info:
        topics.update("Orders", colour="red")
    assert (info.value.field, info.value.rule) == ("colour", "unknown_field")
    with pytest.raises(ValidationError) as info:
        topics.update("Orders", topic_name="Other")
    assert info.value.rule == "unknown_field"
    with pytest.raises(ValidationError) as info:
        topics.update("Orders", perm=9)
    assert (info.value.field, info.value.rule) == ("perm", "range")
    assert topics.require("Orders").perm == 6


def test_update_of_a_loaded_topic_checks_only_what_changes(
    config_dir: Path, clock: FakeClock
) -> None:
    # A RocketMQ file may hold values our input rules refuse (RocketMQ has no queue bound).
    text = fixture_text("topics_legacy_4x.json").replace(
        '"readQueueNums":4', '"readQueueNums":2048'
    )
    config_dir.mkdir(parents=True)
    (config_dir / "topics.json").write_text(text)
    topics = manager(config_dir, clock)
    assert topics.update("TopicTest", perm=4).read_queue_nums == 2048


# -- retry, DLQ, auto-create ---------------------------------------------------------------------


def test_retry_and_dlq_topics(config_dir: Path, clock: FakeClock) -> None:
    topics = manager(config_dir, clock)
    retry = topics.create_retry_topic("group_a", queue_nums=2)
    assert retry == TopicConfig("%RETRY%group_a", 2, 2, 6)
    assert topics.create_retry_topic("group_a", queue_nums=5) == retry  # kept as it is
    assert topics.create_dlq_topic("group_a") == TopicConfig("%DLQ%group_a", 1, 1, 6)
    assert "%DLQ%group_a" in file_state(config_dir)["topicConfigTable"]
    with pytest.raises(ValidationError) as info:
        topics.create_retry_topic("bad group")
    assert (info.value.field, info.value.rule) == ("group", "pattern")


def test_auto_create_copies_the_default_topic(config_dir: Path, clock: FakeClock) -> None:
    topics = manager(config_dir, clock)
    created = topics.auto_create_from_default("NewTopic", 16)
    assert created == TopicConfig("NewTopic", 8, 8, 6)  # min(16, TBW102's 8), INHERIT dropped
    assert topics.auto_create_from_default("NewTopic", 2) == created
    assert topics.auto_create_from_default("Small", 2) == TopicConfig("Small", 2, 2, 6)
    assert topics.auto_create_from_default("Zero", 0) == TopicConfig("Zero", 1, 1, 6)
    assert manager(config_dir, clock).get("NewTopic") == created


def test_auto_create_refused(config_dir: Path, clock: FakeClock) -> None:
    topics = manager(config_dir, clock, auto_create_topic_enable=False)
    assert topics.auto_create_from_default("NewTopic", 4) is None
    assert topics.auto_create_from_default("NewTopic", 4, default_topic="Missing") is None
    topics.create(TopicConfig("Plain", perm=6))
    assert topics.auto_create_from_default("NewTopic", 4, default_topic="Plain") is None
    topics.create(TopicConfig("Parent", 4, 4, perm=7))
    child = topics.auto_create_from_default("NewTopic", 8, default_topic="Parent")
    assert child == TopicConfig("NewTopic", 4, 4, 6)
    with pytest.raises(ValidationError):
        topics.auto_create_from_default("bad name", 4)
    with pytest.raises(ValidationError):
        topics.auto_create_from_default("rmq_sys_x", 4, default_topic="Parent")


# -- documents -----------------------------------------------------------------------------------


def test_import_replaces_everything_and_keeps_system_topics(
    config_dir: Path, clock: FakeClock
) -> None:
    topics = manager(config_dir, clock)
    topics.create(TopicConfig("Old"))
    topics.replace_from_document(fixture_text("topics_legacy_4x.json"))
    assert topics.get("Old") is None
    assert topics.require("TopicTest").read_queue_nums == 4
    assert set(SYSTEM_TOPICS) <= {t.topic_name for t in topics.list()}
    assert topics.data_version.counter == 2  # our version moves on; the document's is not taken
    assert manager(config_dir, clock).require("TopicTest").read_queue_nums == 4
    assert topics.to_document() == (config_dir / "topics.json").read_text()


def test_preview_shows_the_import_as_the_file_would_hold_it_and_changes_nothing(
    config_dir: Path, clock: FakeClock
) -> None:
    topics = manager(config_dir, clock)
    topics.create(TopicConfig("Old"))
    before = topics.to_document()
    preview = loads_fastjson(topics.preview_document(fixture_text("topics_legacy_4x.json")))
    table = preview["topicConfigTable"]
    assert "Old" not in table and table["TopicTest"]["readQueueNums"] == 4
    assert set(SYSTEM_TOPICS) <= set(table)  # as the import would keep them
    assert topics.to_document() == before and topics.get("Old") is not None
    with pytest.raises(ValidationError):
        topics.preview_document('{"topicConfigTable": 7}')


@pytest.mark.parametrize(
    ("document", "field", "rule"),
    [
        ("not json", "document", "json"),
        ("[]", "document", "type"),
        ('{"dataVersion":{}}', "topicConfigTable", "required"),
        (
            '{"topicConfigTable":{"A":{"perm":6},"B":{"perm":9}}}',
            "topicConfigTable.B.perm",
            "range",
        ),
        ('{"topicConfigTable":{"A":{"perm":"6"}}}', "topicConfigTable.A.perm", "type"),
        ('{"topicConfigTable":{"bad name":{}}}', "topicConfigTable.bad name.topic_name", "pattern"),
        (
            '{"topicConfigTable":{"A":{"topicName":"B"}}}',
            "topicConfigTable.A.topicName",
            "mismatch",
        ),
        (
            '{"topicConfigTable":{"A":{"readQueueNums":0}}}',
            "topicConfigTable.A.read_queue_nums",
            "range",
        ),
        ('{"topicConfigTable":{"A":[]}}', "topicConfigTable.A", "type"),
    ],
)
def test_an_invalid_document_changes_nothing(
    config_dir: Path, clock: FakeClock, document: str, field: str, rule: str
) -> None:
    topics = manager(config_dir, clock)
    topics.create(TopicConfig("Keep"))
    before_file = (config_dir / "topics.json").read_bytes()
    before = topics.list()
    with pytest.raises(ValidationError) as info:
        topics.replace_from_document(document)
    assert (info.value.field, info.value.rule) == (field, rule)
    assert topics.list() == before
    assert topics.data_version.counter == 1
    assert (config_dir / "topics.json").read_bytes() == before_file
