"""Committed consumer offsets and consumerOffset.json (spec 8.4)."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from mqcore.clock import FakeClock
from mqcore.errors import ValidationError
from mqcore.metadata.jsonfile import loads_fastjson
from mqcore.metadata.offsets import ConsumerOffsetManager, offset_key, split_offset_key
from tests.mqcore.metadata.support import NOW_MS, fixture_text, install_fixture


def manager(config_dir: Path, clock: FakeClock, **options: int) -> ConsumerOffsetManager:
    offsets = ConsumerOffsetManager(config_dir, clock, **options)
    offsets.load()
    return offsets


def test_keys() -> None:
    assert offset_key("T", "g") == "T@g"
    assert split_offset_key("T@g") == ("T", "g")
    assert split_offset_key("T@g@x") is None and split_offset_key("@g") is None


def test_java_file_round_trips_byte_for_byte(config_dir: Path, clock: FakeClock) -> None:
    install_fixture(config_dir, "consumerOffset.json", "consumerOffset.json")
    offsets = manager(config_dir, clock)
    assert offsets.offsets_for("group_a", "TopicTest") == {0: 250, 1: 251, 2: 250, 3: 249}
    assert offsets.query("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", 0) == 26
    assert offsets.data_version.counter == 7
    assert offsets.to_document() == fixture_text("consumerOffset.json")
    offsets.persist()
    written = (config_dir / "consumerOffset.json").read_bytes()
    assert written == fixture_text("consumerOffset.json").encode()


def test_legacy_4x_file_with_only_the_offset_table(config_dir: Path, clock: FakeClock) -> None:
    install_fixture(config_dir, "consumerOffset_legacy_4x.json", "consumerOffset.json")
    offsets = manager(config_dir, clock)
    group = "please_rename_unique_group_name_4"
    assert offsets.offsets_for(group, "TopicTest")[15] == 20
    assert offsets.topics_of_group(group) == ["%RETRY%" + group, "TopicTest"]
    offsets.persist()
    written = (config_dir / "consumerOffset.json").read_text()
    assert '"groupTopicMap":{\n\t\t"please_rename_unique_group_name_4":["%RETRY%' in written
    assert '\t\t"TopicTest@please_rename_unique_group_name_4":{0:533,1:533,' in written
    assert loads_fastjson(written)["dataVersion"] == {
        "counter": 0,
        "stateVersion": 0,
        "timestamp": NOW_MS,
    }


def test_commit_query_and_lookups(config_dir: Path, clock: FakeClock) -> None:
    offsets = manager(config_dir, clock)
    assert offsets.query("g1", "T1", 0) is None
    offsets.commit("g1", "T1", 0, 10)
    offsets.commit("g1", "T1", 1, 11)
    offsets.commit("g1", "T1", 0, 5)  # rewinds are accepted
    offsets.commit("g2", "T1", 0, 7)
    offsets.commit("g1", "T2", 3, 1)
    assert offsets.query("g1", "T1", 0) == 5
    assert offsets.offsets_for("g1", "T1") == {0: 5, 1: 11}
    assert offsets.offsets_for("g9", "T1") == {}
    assert offsets.groups_of_topic("T1") == ["g1", "g2"]
    assert offsets.topics_of_group("g1") == ["T1", "T2"]
    assert offsets.remove_topic("T1") == 2
    assert offsets.topics_of_group("g1") == ["T2"]
    assert offsets.remove_group("g1") == 1
    assert offsets.groups_of_topic("T2") == []
    assert offsets.data_version.counter == 2  # removals bump it


@pytest.mark.parametrize(
    ("args", "field", "rule"),
    [
        (("bad group", "T", 0, 1), "group", "pattern"),
        (("g", "T@x", 0, 1), "topic", "pattern"),
        (("g", "T", -1, 1), "queue_id", "range"),
        (("g", "T", 0, -1), "offset", "range"),
    ],
)
def test_commit_validation(
    config_dir: Path, clock: FakeClock, args: tuple[str, str, int, int], field: str, rule: str
) -> None:
    offsets = manager(config_dir, clock)
    with pytest.raises(ValidationError) as info:
        offsets.commit(*args)
    assert (info.value.field, info.value.rule) == (field, rule)


def test_commits_reach_disk_only_on_persist(config_dir: Path, clock: FakeClock) -> None:
    offsets = manager(config_dir, clock)
    offsets.commit("g", "T", 0, 1)
    assert not (config_dir / "consumerOffset.json").exists()
    offsets.persist()
    offsets.commit("g", "T", 0, 2)
    assert manager(config_dir, clock).query("g", "T", 0) == 1
    offsets.persist()
    assert manager(config_dir, clock).query("g", "T", 0) == 2


def test_data_version_moves_every_500_commits(config_dir: Path, clock: FakeClock) -> None:
    offsets = manager(config_dir, clock)
    for i in range(499):
        offsets.commit("g", "T", 0, i)
    assert offsets.data_version.counter == 0
    clock.advance(5)
    offsets.commit("g", "T", 0, 499)
    assert offsets.data_version.counter == 1
    assert offsets.data_version.timestamp == NOW_MS + 5
    for i in range(500):
        offsets.commit("g", "T", 1, i)
    assert offsets.data_version.counter == 2
    assert manager(config_dir / "x", clock, update_version_step=1).data_version.counter == 0


def test_commits_from_many_threads(config_dir: Path, clock: FakeClock) -> None:
    offsets = manager(config_dir, clock)
    threads_count, per_thread = 8, 1500
    start = threading.Barrier(threads_count + 2, timeout=30)  # consumers, persister, main
    errors: list[BaseException] = []

    def consumer(n: int) -> None:
        try:
            start.wait()
            for i in range(per_thread):
                offsets.commit(f"g{n % 2}", "T", n, i + 1)  # own queue, monotonic
                offsets.commit("shared", f"T{i % 3}", i % 4, 1)
        except BaseException as exc:  # reported below
            errors.append(exc)

    def persister() -> None:
        try:
            start.wait()
            for _ in range(20):
                offsets.persist()
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=consumer, args=(n,)) for n in range(threads_count)]
    workers.append(threading.Thread(target=persister))
    for t in workers:
        t.start()
    start.wait()
    for t in workers:
        t.join()
    assert errors == []
    for n in range(threads_count):
        assert offsets.query(f"g{n % 2}", "T", n) == per_thread
    assert offsets.data_version.counter == threads_count * per_thread * 2 // 500
    offsets.persist()
    again = manager(config_dir, clock)
    assert again.offsets_for("g0", "T") == offsets.offsets_for("g0", "T")
    assert again.topics_of_group("shared") == ["T0", "T1", "T2"]


def test_malformed_keys_are_kept_but_not_queried(config_dir: Path, clock: FakeClock) -> None:
    config_dir.mkdir(parents=True)
    (config_dir / "consumerOffset.json").write_text('{"offsetTable":{"noSeparator":{0:1}}}')
    offsets = manager(config_dir, clock)
    assert offsets.groups_of_topic("noSeparator") == []
    assert '"noSeparator":{0:1' in offsets.to_document()


@pytest.mark.parametrize(
    ("document", "field", "rule"),
    [
        ('{"offsetTable":{"noSeparator":{0:1}}}', "offsetTable.noSeparator", "pattern"),
        ('{"offsetTable":{"T@g":{0:-1}}}', "offsetTable.T@g.0", "range"),
        ('{"offsetTable":{"T@g":{"x":1}}}', "offsetTable.T@g", "type"),
        ('{"offsetTable":{"T@g":{-1:1}}}', "offsetTable.T@g key", "range"),
        (
            '{"offsetTable":{"T@g":{0:1},"T@bad group":{0:1}}}',
            "offsetTable.T@bad group group",
            "pattern",
        ),
        ('{"dataVersion":{"counter":"x"},"offsetTable":{}}', "dataVersion.counter", "type"),
    ],
)
def test_an_invalid_document_changes_nothing(
    config_dir: Path, clock: FakeClock, document: str, field: str, rule: str
) -> None:
    offsets = manager(config_dir, clock)
    offsets.commit("g", "T", 0, 42)
    offsets.persist()
    before = (config_dir / "consumerOffset.json").read_bytes()
    with pytest.raises(ValidationError) as info:
        offsets.replace_from_document(document)
    assert (info.value.field, info.value.rule) == (field, rule)
    assert offsets.offsets_for("g", "T") == {0: 42}
    assert (config_dir / "consumerOffset.json").read_bytes() == before


def test_import_replaces_and_persists(config_dir: Path, clock: FakeClock) -> None:
    offsets = manager(config_dir, clock)
    offsets.commit("g", "T", 0, 42)
    offsets.replace_from_document(fixture_text("consumerOffset.json"))
    assert offsets.query("g", "T", 0) is None
    assert manager(config_dir, clock).query("group_a", "TopicTest", 3) == 249
    # Standard JSON (quoted keys), as another tool might produce, imports too.
    offsets.replace_from_document('{"offsetTable":{"T@g":{"0":9}}}')
    assert offsets.query("g", "T", 0) == 9


def test_random_commits_match_a_dict_model(config_dir: Path, clock: FakeClock) -> None:
    rng = random.Random(7)
    offsets = manager(config_dir, clock)
    model: dict[tuple[str, str, int], int] = {}
    for _ in range(2000):
        key = (f"g{rng.randrange(3)}", f"T{rng.randrange(3)}", rng.randrange(4))
        model[key] = rng.randrange(1000)
        offsets.commit(*key, model[key])
        if rng.random() < 0.01:
            offsets.persist()
            offsets = manager(config_dir, clock)  # a restart after a persist loses nothing
    for (group, topic, queue_id), value in model.items():
        assert offsets.query(group, topic, queue_id) == value


def test_activity_tells_when_offsets_last_moved(config_dir: Path, clock: FakeClock) -> None:
    """The dataVersion stays at 0 for 499 commits; activity counts them and keeps the time
    of the last one (what the console's config page shows)."""
    m = manager(config_dir, clock)
    assert m.activity == (0, m.data_version.timestamp)
    clock.advance(60_000)
    m.commit("g", "t", 0, 5)
    clock.advance(1_000)
    m.commit("g", "t", 1, 7)
    assert m.data_version.counter == 0
    assert m.activity == (2, clock.now_ms())
