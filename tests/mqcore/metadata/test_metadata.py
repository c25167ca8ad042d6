"""The Metadata facade over the five config files."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.metadata import Metadata, TopicConfig
from tests.mqcore.metadata.support import install_fixture


def test_load_persist_and_reload(config_dir: Path, clock: FakeClock) -> None:
    meta = Metadata(config_dir, clock, cluster_name="c1", broker_name="b1")
    meta.load()
    assert meta.topics.get("c1") is not None and meta.topics.get("b1") is not None
    meta.topics.create(TopicConfig("Orders", 4, 4))
    meta.groups.get_or_auto_create("workers")
    meta.offsets.commit("workers", "Orders", 2, 99)
    meta.delay_offsets.update(3, 12)
    meta.persist_all()
    names = ["consumerFilter.json", "consumerOffset.json", "delayOffset.json"]
    names += ["subscriptionGroup.json", "topics.json"]
    # Each file X beside its integrity record X.sum (and X.bak once written twice).
    assert sorted(p.name for p in config_dir.iterdir() if not p.name.endswith(".bak")) == sorted(
        names + [f"{name}.sum" for name in names]
    )
    again = Metadata(config_dir, clock, cluster_name="c1", broker_name="b1")
    again.load()
    assert again.topics.require("Orders").read_queue_nums == 4
    assert again.groups.get("workers") is not None
    assert again.offsets.query("workers", "Orders", 2) == 99
    assert again.delay_offsets.get(3) == 12


def test_loads_a_java_config_directory(config_dir: Path, clock: FakeClock) -> None:
    for name in (
        "topics.json",
        "subscriptionGroup.json",
        "consumerOffset.json",
        "delayOffset.json",
        "consumerFilter.json",
    ):
        install_fixture(config_dir, name, name)
    meta = Metadata(config_dir, clock)
    meta.load()
    assert meta.topics.require("OrderEvents").order
    assert meta.groups.forbidden("group_a", "TopicTest") == 5
    assert meta.offsets.query("group_a", "TopicTest", 1) == 251
    assert meta.delay_offsets.get(18) == 2
    assert meta.filters.get("TopicTest", "group_gone") is not None


def test_options_are_routed(config_dir: Path, clock: FakeClock) -> None:
    meta = Metadata(
        config_dir,
        clock,
        auto_create_topic_enable=False,
        auto_create_subscription_group=False,
        consumer_offset_update_version_step=1,
        delay_offset_update_version_step=2,
        filter_data_clean_time_span_ms=10,
    )
    assert meta.topics.get("TBW102") is None
    assert meta.groups.get_or_auto_create("nobody") is None
    meta.offsets.commit("g", "T", 0, 1)
    assert meta.offsets.data_version.counter == 1
    meta.delay_offsets.update(1, 1)
    assert meta.delay_offsets.data_version.counter == 0
    with pytest.raises(TypeError, match="colour"):
        Metadata(config_dir, clock, colour="red")
