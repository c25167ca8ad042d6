"""Consumer groups and subscriptionGroup.json (spec 8.3, 8.7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import ConflictError, NotFoundError, ValidationError
from mqcore.metadata.groups import SYSTEM_GROUPS, SubscriptionGroupConfig, SubscriptionGroupManager
from mqcore.metadata.jsonfile import dumps_fastjson, loads_fastjson
from tests.mqcore.metadata.support import fixture_text, install_fixture

# spec 8.3, alphabetical as written, with the defaults
DEFAULT_BEAN = (
    "{\n"
    '\t"attributes":{},\n'
    '\t"brokerId":0,\n'
    '\t"consumeBroadcastEnable":true,\n'
    '\t"consumeEnable":true,\n'
    '\t"consumeFromMinEnable":true,\n'
    '\t"consumeMessageOrderly":false,\n'
    '\t"consumeTimeoutMinute":15,\n'
    '\t"groupName":"g",\n'
    '\t"groupRetryPolicy":{\n'
    '\t\t"type":"CUSTOMIZED"\n'
    "\t},\n"
    '\t"groupSysFlag":0,\n'
    '\t"notifyConsumerIdsChangedEnable":true,\n'
    '\t"retryMaxTimes":16,\n'
    '\t"retryQueueNums":1,\n'
    '\t"whichBrokerWhenConsumeSlowly":1\n'
    "}"
)


def manager(config_dir: Path, clock: FakeClock, **options: Any) -> SubscriptionGroupManager:
    groups = SubscriptionGroupManager(config_dir, clock, **options)
    groups.load()
    return groups


def file_state(config_dir: Path) -> Any:
    return loads_fastjson((config_dir / "subscriptionGroup.json").read_text())


def test_defaults_are_rocketmqs() -> None:
    assert dumps_fastjson(SubscriptionGroupConfig("g").to_json()) == DEFAULT_BEAN


def test_system_groups_exist_with_defaults(config_dir: Path, clock: FakeClock) -> None:
    groups = SubscriptionGroupManager(config_dir, clock)
    assert [g.group_name for g in groups.list()] == list(SYSTEM_GROUPS)
    assert SYSTEM_GROUPS == (
        "TOOLS_CONSUMER",
        "FILTERSRV_CONSUMER",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PULL",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_RMQ_SYS_TRANS",
    )
    for name in SYSTEM_GROUPS:
        assert groups.require(name) == SubscriptionGroupConfig(name)
        assert groups.is_system_group(name)
    assert groups.is_system_group("CID_RMQ_SYS_OTHER")
    with pytest.raises(ValidationError) as info:
        groups.delete("TOOLS_CONSUMER")
    assert (info.value.field, info.value.rule) == ("group_name", "system_group")
    with pytest.raises(ConflictError):
        groups.create(SubscriptionGroupConfig("TOOLS_CONSUMER"))


def test_java_file_round_trips_byte_for_byte(config_dir: Path, clock: FakeClock) -> None:
    install_fixture(config_dir, "subscriptionGroup.json", "subscriptionGroup.json")
    groups = manager(config_dir, clock)
    group_a = groups.require("group_a")
    assert group_a.group_retry_policy == {
        "customizedRetryPolicy": {"next": [1000, 5000, 10000, 30000]},
        "type": "CUSTOMIZED",
    }
    assert group_a.subscription_data_set == (
        {
            "expression": "TagA || TagB",
            "expressionType": "TAG",
            "topic": "TopicTest",
            "version": 1699999996000,
        },
    )
    assert groups.require("group_b").group_retry_policy["type"] == "EXPONENTIAL"
    assert groups.forbidden("group_a", "TopicTest") == 5
    assert groups.forbidden_table() == {"group_a": {"TopicTest": 5}}
    assert groups.to_document() == fixture_text("subscriptionGroup.json")
    groups.persist()
    written = (config_dir / "subscriptionGroup.json").read_bytes()
    assert written == fixture_text("subscriptionGroup.json").encode()


def test_legacy_4x_file(config_dir: Path, clock: FakeClock) -> None:
    install_fixture(config_dir, "subscriptionGroup_legacy_4x.json", "subscriptionGroup.json")
    groups = manager(config_dir, clock)
    name = "please_rename_unique_group_name_4"
    assert groups.require(name) == SubscriptionGroupConfig(name)
    assert set(SYSTEM_GROUPS) <= {g.group_name for g in groups.list()}
    groups.persist()
    written = file_state(config_dir)
    assert written["forbiddenTable"] == {}
    assert written["subscriptionGroupTable"][name]["groupRetryPolicy"] == {"type": "CUSTOMIZED"}


def test_crud_persists_every_change(config_dir: Path, clock: FakeClock) -> None:
    groups = manager(config_dir, clock)
    groups.create(SubscriptionGroupConfig("orders", retry_max_times=3))
    assert file_state(config_dir)["subscriptionGroupTable"]["orders"]["retryMaxTimes"] == 3
    updated = groups.update(
        "orders",
        consume_enable=False,
        subscription_data_set=[
            {"topic": "T", "expressionType": "TAG", "expression": "*", "version": 1}
        ],
        group_retry_policy={"type": "EXPONENTIAL", "exponentialRetryPolicy": {"initial": 1000}},
    )
    reloaded = manager(config_dir, clock).require("orders")
    assert reloaded == updated
    assert not reloaded.consume_enable and reloaded.retry_max_times == 3
    text = (config_dir / "subscriptionGroup.json").read_text()
    assert '"subscriptionDataSet":[{\n\t\t\t\t"expression":"*",' in text
    groups.delete("orders")
    assert manager(config_dir, clock).get("orders") is None
    assert groups.data_version.counter == 3


def test_forbidden_bits(config_dir: Path, clock: FakeClock) -> None:
    groups = manager(config_dir, clock)
    groups.create(SubscriptionGroupConfig("orders"))
    assert groups.set_forbidden("orders", "T", 0, True) == 1
    assert groups.set_forbidden("orders", "T", 2, True) == 5
    assert groups.set_forbidden("orders", "T", 0, False) == 4
    assert groups.set_forbidden("orders", "T", 31, True) == 4 - 2**31  # a Java int
    assert file_state(config_dir)["forbiddenTable"] == {"orders": {"T": 4 - 2**31}}
    assert manager(config_dir, clock).forbidden("orders", "T") == 4 - 2**31
    groups.delete("orders")
    assert groups.forbidden_table() == {}


def test_auto_create(config_dir: Path, clock: FakeClock) -> None:
    groups = manager(config_dir, clock)
    created = groups.get_or_auto_create("fresh")
    assert created == SubscriptionGroupConfig("fresh")
    assert manager(config_dir, clock).get("fresh") == created
    assert groups.get_or_auto_create("fresh") is created
    with pytest.raises(ValidationError):
        groups.get_or_auto_create("bad name")

    off = manager(config_dir / "off", clock, auto_create=False)
    assert off.get_or_auto_create("fresh") is None
    assert off.get_or_auto_create("CID_RMQ_SYS_NEW") == SubscriptionGroupConfig("CID_RMQ_SYS_NEW")


@pytest.mark.parametrize(
    ("changes", "field", "rule"),
    [
        ({"retry_max_times": -1}, "retry_max_times", "range"),
        ({"retry_queue_nums": 1025}, "retry_queue_nums", "range"),
        ({"consume_enable": "yes"}, "consume_enable", "type"),
        ({"group_retry_policy": {"type": "LINEAR"}}, "group_retry_policy.type", "choice"),
        (
            {"group_retry_policy": {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [-1]}}},
            "group_retry_policy.customizedRetryPolicy.next[0]",
            "range",
        ),
        (
            {"subscription_data_set": [{"topic": "bad topic"}]},
            "subscription_data_set[0].topic",
            "pattern",
        ),
        ({"attributes": {"k": 1}}, "attributes.k", "type"),
        ({"colour": "red"}, "colour", "unknown_field"),
    ],
)
def test_validation_names_field_and_rule(
    config_dir: Path, clock: FakeClock, changes: dict[str, Any], field: str, rule: str
) -> None:
    groups = manager(config_dir, clock)
    groups.create(SubscriptionGroupConfig("orders"))
    with pytest.raises(ValidationError) as info:
        groups.update("orders", **changes)
    assert (info.value.field, info.value.rule) == (field, rule)
    assert groups.require("orders") == SubscriptionGroupConfig("orders")


def test_bad_names(config_dir: Path, clock: FakeClock) -> None:
    groups = manager(config_dir, clock)
    for name, rule in [("a" * 121, "length"), ("a b", "pattern"), (" ", "blank")]:
        with pytest.raises(ValidationError) as info:
            groups.create(SubscriptionGroupConfig(name))
        assert (info.value.field, info.value.rule) == ("group_name", rule)
    groups.create(SubscriptionGroupConfig("a" * 120))
    with pytest.raises(NotFoundError):
        groups.update("missing", retry_max_times=1)


def test_import_and_invalid_import(config_dir: Path, clock: FakeClock) -> None:
    groups = manager(config_dir, clock)
    groups.create(SubscriptionGroupConfig("keep"))
    before = (config_dir / "subscriptionGroup.json").read_bytes()
    bad = fixture_text("subscriptionGroup.json").replace(
        '"retryQueueNums":2', '"retryQueueNums":-2'
    )
    with pytest.raises(ValidationError) as info:
        groups.replace_from_document(bad)
    assert info.value.field == "subscriptionGroupTable.group_b.retry_queue_nums"
    bad_forbidden = fixture_text("subscriptionGroup.json").replace(
        '"TopicTest":5', '"TopicTest":"5"'
    )
    with pytest.raises(ValidationError) as info:
        groups.replace_from_document(bad_forbidden)
    assert (info.value.field, info.value.rule) == ("forbiddenTable.group_a.TopicTest", "type")
    assert groups.get("keep") is not None and groups.get("group_a") is None
    assert (config_dir / "subscriptionGroup.json").read_bytes() == before

    groups.replace_from_document(fixture_text("subscriptionGroup.json"))
    assert groups.get("keep") is None and groups.forbidden("group_a", "TopicTest") == 5
    assert manager(config_dir, clock).require("group_b").retry_queue_nums == 2
