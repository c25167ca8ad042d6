"""A damaged, cut or deleted config file over a real store: the newest intact copy is loaded,
what it lacks is re-created from the store's data, and the recovery is reported.

Every test starts from a copy of one store that a real Broker wrote (topics, groups, messages,
offsets, delay offsets, filters), starts it as ``cairn.runtime`` does (store, then
``Metadata.load(store)``, then the Broker), and reads what an operator and a consumer see.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from mqcore.broker import Broker, BrokerConfig, OutgoingMessage, PullStatus
from mqcore.clock import FakeClock
from mqcore.metadata import (
    ConfigRecovery,
    ConsumerFilterData,
    ConsumerOffsetManager,
    Metadata,
)
from mqcore.metadata.check import CONFIG_FILES, check_config_dir
from mqcore.metadata.checked_file import inspect_file
from mqcore.store import MessageStore
from mqcore.store.config import StoreConfig
from mqcore.store.health import Problem
from tests.conftest import REPO

SMALL = StoreConfig(
    commitlog_file_size=64 * 1024,
    consume_queue_file_entries=32,
    index_hash_slots=64,
    index_max_entries=256,
)
NOW_MS = 1_700_000_000_000
RB_MESSAGES = 20


@dataclass
class Started:
    store: MessageStore
    metadata: Metadata
    broker: Broker
    recoveries: list[ConfigRecovery]

    def problems(self) -> list[Problem]:
        return [p for p in self.store.health.problems() if p.kind == "config_recovered"]

    def pulled(self, topic: str, queue_id: int) -> list[bytes]:
        result = self.broker.pull("reader", topic, queue_id, 0, max_count=100)
        if result.status is not PullStatus.FOUND:
            return []
        return [m.body for m in result.messages]


@contextmanager
def started(root: Path) -> Iterator[Started]:
    """Start as ``cairn.runtime`` does: open (recover) the store, load the config against it,
    start the broker; stop it all at the end."""
    clock = FakeClock(NOW_MS)
    store = MessageStore(root, SMALL, clock=clock).open()
    try:
        metadata = Metadata(root / "config", clock)
        recoveries = metadata.load(store)
        broker = Broker(store, metadata, config=BrokerConfig(dispatch_on_send=True), clock=clock)
        broker.start()
        try:
            yield Started(store, metadata, broker, recoveries)
        finally:
            broker.stop()
    finally:
        store.close()


def populate(root: Path) -> None:
    """Two generations of every file; the newest change of topics.json creates ``rb`` (4
    queues, 20 messages), that of subscriptionGroup.json creates ``late`` (offsets on rb)."""
    with started(root) as s:
        b, meta = s.broker, s.metadata
        b.admin.create_topic("orders", read_queue_nums=2, write_queue_nums=2)
        b.send("orders", [OutgoingMessage(b"o%d" % i, queue_id=i % 2) for i in range(10)])
        b.admin.create_group("g")
        b.commit_offset("g", "orders", 0, 3)
        meta.delay_offsets.update(3, 7)
        meta.filters.register(ConsumerFilterData("g", "orders", "a > 1", "SQL92", NOW_MS))
        meta.persist_all()
        b.admin.create_group("late")
        b.admin.create_topic("rb", read_queue_nums=4, write_queue_nums=4)
        b.send("rb", [OutgoingMessage(b"r%d" % i, queue_id=i % 4) for i in range(RB_MESSAGES)])
        b.commit_offset("g", "orders", 0, 5)
        b.commit_offset("late", "rb", 1, 2)
        meta.delay_offsets.update(3, 9)
        meta.filters.register(ConsumerFilterData("late", "rb", "b > 2", "SQL92", NOW_MS))
        for manager in (meta.offsets, meta.delay_offsets, meta.filters):
            manager.persist()  # topics and groups were written by their changes


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("template") / "store"
    populate(root)
    return root


@pytest.fixture
def root(template: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(template, copy)
    return copy


def flip_at(position: Callable[[bytes], int], mask: int = 0x01) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[position(bytes(data))] ^= mask
        path.write_bytes(bytes(data))

    return damage


def first_digit(data: bytes) -> int:
    return next(i for i, b in enumerate(data) if chr(b).isdigit() and data[i - 1 : i] == b":")


DAMAGES: dict[str, Callable[[Path], None]] = {
    "first byte": flip_at(lambda d: 0),
    "middle byte": flip_at(lambda d: len(d) // 2, 0x40),
    "last byte": flip_at(lambda d: len(d) - 1, 0x80),
    "a digit (still parses)": flip_at(first_digit),
    "a letter of a key (still parses)": flip_at(lambda d: d.index(b'"') + 2),
    "cut in half": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "deleted": lambda p: p.unlink(),
}


def config(root: Path, name: str) -> Path:
    return root / "config" / name


def only_recovery(s: Started, name: str) -> ConfigRecovery:
    assert [r.file_name for r in s.recoveries] == [name], [r.summary for r in s.recoveries]
    return s.recoveries[0]


@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize("name", CONFIG_FILES)
def test_a_damaged_file_loads_its_backup_is_reported_and_rewritten(
    root: Path, name: str, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    DAMAGES[damage](config(root, name))
    with caplog.at_level(logging.ERROR), started(root) as s:
        recovery = only_recovery(s, name)
        assert recovery.detail["loaded"] == f"{name}.bak"
        # One change behind, or the same bytes when the last write changed nothing (the
        # broker's stop persists offsets and delay offsets again): the generation says which.
        behind = 0 if name in ("consumerOffset.json", "delayOffset.json") else 1
        newest = recovery.detail["newest_generation"]
        assert recovery.detail["loaded_generation"] == newest - behind
        assert recovery.detail["older_than_newest"] == bool(behind)
        assert f"loaded {name}.bak (generation" in recovery.summary
        assert recovery.problem_id.startswith(f"config:{name}:")
        [problem] = s.problems()
        assert (problem.id, problem.summary) == (recovery.problem_id, recovery.summary)
        assert any(recovery.summary in r.getMessage() for r in caplog.records)
        assert all(r.levelno == logging.ERROR for r in caplog.records if name in r.getMessage())
        # Whatever the copy lacked, the data stays reachable.
        assert sum(len(s.pulled("rb", q)) for q in range(4)) == RB_MESSAGES
        assert s.broker.metadata.groups.get("late") is not None
    # Rewritten at once: the file is intact again and the next start is clean.
    assert inspect_file(config(root, name)).main.version is not None
    assert [f.text for f in check_config_dir(root / "config") if f.defect] == []
    with started(root) as again:
        assert again.recoveries == []
        assert [p.id for p in again.problems()] == [recovery.problem_id]  # until acknowledged


def test_topics_json_one_change_behind_gets_the_lost_topic_back(root: Path) -> None:
    DAMAGES["a digit (still parses)"](config(root, "topics.json"))
    with started(root) as s:
        recovery = only_recovery(s, "topics.json")
        [rb] = recovery.detail["recreated"]
        assert (rb["name"], rb["read_queue_nums"], rb["write_queue_nums"], rb["perm"]) == (
            "rb",
            4,
            4,
            6,
        )
        assert rb["evidence"] == [
            "ConsumeQueue directories for queues 0-3",
            "offsets committed by group late",
        ]
        assert "re-created from the store's data: 1 topic rb (4 queues)" in recovery.summary
        assert "1 change older" in recovery.summary
        assert [len(s.pulled("rb", q)) for q in range(4)] == [5, 5, 5, 5]
        assert s.broker.admin.get_topic("orders").read_queue_nums == 2


def test_a_flipped_letter_in_a_topic_name_is_detected_and_named(root: Path) -> None:
    path = config(root, "topics.json")
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"rb"', b'"rc"', 1))  # still parses: topicConfigTable key
    with started(root) as s:
        recovery = only_recovery(s, "topics.json")
        assert recovery.detail["damaged_copy_also_names"] == ["rc"]
        assert "the damaged copy also names rc" in recovery.summary
        assert [f["name"] for f in recovery.detail["recreated"]] == ["rb"]
        assert s.metadata.topics.get("rc") is None


def test_subscription_group_json_behind_gets_the_group_with_offsets_back(root: Path) -> None:
    DAMAGES["middle byte"](config(root, "subscriptionGroup.json"))
    with started(root) as s:
        recovery = only_recovery(s, "subscriptionGroup.json")
        assert recovery.detail["recreated"] == [
            {"name": "late", "retry_queue_nums": 1, "evidence": ["offsets committed on rb"]}
        ]
        assert s.metadata.groups.require("late").retry_queue_nums == 1


def test_consumer_offsets_behind_are_reported_with_what_it_means(root: Path) -> None:
    offsets = ConsumerOffsetManager(root / "config", FakeClock(NOW_MS))
    offsets.load()
    offsets.commit("g", "orders", 0, 8)
    offsets.persist()  # as the 5 s persist does; then the broker dies
    DAMAGES["cut in half"](config(root, "consumerOffset.json"))
    with started(root) as s:
        recovery = only_recovery(s, "consumerOffset.json")
        assert "consumers receive again the messages they committed after it" in recovery.summary
        assert "1 change older" in recovery.summary
        assert s.metadata.offsets.query("g", "orders", 0) == 5  # the commit before


@pytest.mark.parametrize("name", CONFIG_FILES)
def test_x_and_its_backup_deleted(root: Path, name: str) -> None:
    config(root, name).unlink()
    Path(f"{config(root, name)}.bak").unlink()
    with started(root) as s:
        recovery = only_recovery(s, name)
        assert recovery.detail["loaded"] is None
        assert recovery.detail["copies"] == {name: "missing", f"{name}.bak": "missing"}
        assert sum(len(s.pulled("rb", q)) for q in range(4)) == RB_MESSAGES
        if name == "topics.json":
            assert {f["name"]: f["read_queue_nums"] for f in recovery.detail["recreated"]} == {
                "orders": 2,
                "rb": 4,
            }
        if name == "subscriptionGroup.json":
            assert [f["name"] for f in recovery.detail["recreated"]] == ["g", "late"]


def test_no_copy_and_no_record_rebuilds_topics_from_the_store(root: Path) -> None:
    for suffix in ("", ".bak", ".sum"):
        Path(f"{config(root, 'topics.json')}{suffix}").unlink()
    with started(root) as s:
        recovery = only_recovery(s, "topics.json")
        assert recovery.summary.startswith("topics.json: no copy and no record; re-created")
        assert s.broker.admin.get_topic("rb").read_queue_nums == 4
        assert sorted(t.name for t in s.broker.admin.list_topics(include_system=False)) == [
            "orders",
            "rb",
        ]


def test_a_lost_config_directory_rebuilds_internal_topics_by_their_rules(root: Path) -> None:
    with started(root) as s:
        s.metadata.topics.create_retry_topic("late", 1)
        s.broker.send("%RETRY%late", [OutgoingMessage(b"again")])
        s.broker.send("orders", [OutgoingMessage(b"later", delay_level=1)])
        s.broker.send("rb", [OutgoingMessage(b"r-more", queue_id=3)])
    assert (root / "consumequeue" / "SCHEDULE_TOPIC_XXXX").is_dir()
    shutil.rmtree(root / "config")
    with started(root) as s:
        names = {r.file_name: r for r in s.recoveries}
        assert list(names) == ["topics.json", "subscriptionGroup.json"]
        recreated = {
            f["name"]: f["read_queue_nums"] for f in names["topics.json"].detail["recreated"]
        }
        assert recreated == {"%RETRY%late": 1, "orders": 2, "rb": 4}  # no SCHEDULE_TOPIC_XXXX
        assert s.metadata.topics.require("SCHEDULE_TOPIC_XXXX").read_queue_nums == 18
        assert names["subscriptionGroup.json"].detail["recreated"] == [
            {"name": "late", "retry_queue_nums": 1, "evidence": ["has the topic %RETRY%late"]}
        ]
        assert s.pulled("%RETRY%late", 0) == [b"again"]
        assert len(s.pulled("rb", 3)) == RB_MESSAGES // 4 + 1


def test_a_copy_with_fewer_queues_than_the_data_is_widened(root: Path) -> None:
    with started(root) as s:
        s.broker.admin.update_topic("orders", read_queue_nums=3, write_queue_nums=3)
        s.broker.send("orders", [OutgoingMessage(b"q2", queue_id=2)])
    DAMAGES["last byte"](config(root, "topics.json"))
    with started(root) as s:
        recovery = only_recovery(s, "topics.json")
        [widened] = recovery.detail["widened"]
        assert widened["name"] == "orders" and widened["read_queue_nums"] == 3
        assert widened["was"] == {"read_queue_nums": 2, "write_queue_nums": 2}
        assert "orders (2 → 3 queues)" in recovery.summary
        assert s.pulled("orders", 2) == [b"q2"]


def test_an_intact_config_is_never_reconciled(root: Path) -> None:
    with started(root) as s:
        s.broker.send("rb", [OutgoingMessage(b"x", queue_id=0)])
        s.metadata.topics.delete("rb")  # deleted; its queue directories are still there
    with started(root) as s:
        assert s.recoveries == [] and s.problems() == []
        assert s.metadata.topics.get("rb") is None


def test_stale_temp_files_are_removed_at_start(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("topics.json.tmp", "topics.json.bak.tmp", "consumerOffset.json.sum.tmp"):
        config(root, name).write_text("{half")
    with caplog.at_level(logging.INFO), started(root) as s:
        assert s.recoveries == []
    assert not list((root / "config").glob("*.tmp"))
    assert len([r for r in caplog.records if "a crash interrupted" in r.getMessage()]) == 3


def test_the_same_damage_is_reported_once(root: Path) -> None:
    DAMAGES["first byte"](config(root, "delayOffset.json"))
    shutil.copytree(root / "config", root.parent / "saved")
    with started(root) as s:
        first = only_recovery(s, "delayOffset.json").problem_id
    # The rewrite did not reach the disk (say, a crash): the same files, the same problem.
    shutil.rmtree(root / "config")
    shutil.copytree(root.parent / "saved", root / "config")
    with started(root) as s:
        assert only_recovery(s, "delayOffset.json").problem_id == first
        assert [p.id for p in s.problems()] == [first]


def test_check_reports_a_damaged_file_on_a_line_of_its_own(root: Path) -> None:
    DAMAGES["a digit (still parses)"](config(root, "topics.json"))
    DAMAGES["middle byte"](Path(f"{config(root, 'consumerOffset.json')}.bak"))
    config(root, "delayOffset.json.tmp").write_text("{")
    done = subprocess.run(
        [sys.executable, "-m", "mqcore", "check", str(root), "--quiet"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    defects = [line for line in done.stdout.splitlines() if line.startswith("defect: config:")]
    assert len(defects) == 2, done.stdout
    assert defects[0].startswith("defect: config: topics.json: topics.json does not match")
    assert "the next start would load topics.json.bak (generation" in defects[0]
    assert defects[1].startswith("defect: config: consumerOffset.json.bak does not match")
    assert "note: config: delayOffset.json.tmp: left by an interrupted write" in done.stdout


@pytest.mark.parametrize("name", CONFIG_FILES)
def test_a_damaged_backup_is_set_aside_replaced_and_reported(root: Path, name: str) -> None:
    backup = Path(f"{config(root, name)}.bak")
    DAMAGES["a digit (still parses)"](backup)
    with started(root) as s:
        recovery = only_recovery(s, name)
        assert recovery.detail["loaded"] == name and recovery.detail["status"] == "intact"
        assert recovery.summary.startswith(f"{name}: {name}.bak does not match its checksum")
        assert f"{name} itself is intact and was loaded" in recovery.summary
        assert recovery.detail["set_aside"] == [f"{name}.bak.corrupt"]
        assert recovery.detail["recreated"] == []  # X is the newest: nothing to reconcile
        assert [p.id for p in s.problems()] == [recovery.problem_id]
    found = inspect_file(config(root, name))
    assert found.main.version is not None and found.backup.version is not None
    assert [f.text for f in check_config_dir(root / "config") if f.defect] == []
