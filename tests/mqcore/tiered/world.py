"""A broker whose reads go through a TieredMessageStore, over real files, for the tier tests.

``World.fill`` sends messages through the Broker; ``upload`` runs the dispatcher;
``delete_local`` deletes every CommitLog file but the last with the real cleanup step (the
disk-force path) so the early offsets exist only in the tier.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from mqcore.broker import Broker, OutgoingMessage
from mqcore.clock import FakeClock
from mqcore.metadata import Metadata
from mqcore.services import cleanup
from mqcore.services.cleanup import CleanupState
from mqcore.store import MessageStore, StoreConfig
from mqcore.tiered import SegmentBackend
from mqcore.tiered.config import TieredConfig
from mqcore.tiered.dispatcher import UploadResult, upload_step
from mqcore.tiered.storage import TieredStorage
from mqcore.tiered.tiered_store import TieredMessageStore

TOPIC = "orders"
#: 8 KiB CommitLog files, 16-unit ConsumeQueue files: ~30 messages per CommitLog file.
#: Forced cleanup may delete unconsumed local files here (the tests' tier holds them).
SMALL = StoreConfig(
    commitlog_file_size=8 * 1024,
    consume_queue_file_entries=16,
    delete_when="99",
    disk_clean_forcibly_unconsumed=True,
)
#: Uploads everything from offset 0, in small groups.
EAGER = TieredConfig(
    initial_window_ms=None,
    group_commit_count=10,
    commit_log_segment_size_bytes=4096,
    consume_queue_segment_size_bytes=20 * 16,
    key_index_segment_bytes=24 * 40,
)


@dataclass
class World:
    store: MessageStore
    tier: TieredStorage
    tiered: TieredMessageStore
    broker: Broker
    clock: FakeClock

    def fill(self, count: int, *, queues: int = 2, start: int = 0) -> None:
        for i in range(start, start + count):
            self.broker.send(
                TOPIC,
                [
                    OutgoingMessage(
                        f"body-{i}-".encode() + bytes([i % 251]) * (i % 97),
                        tag="even" if i % 2 == 0 else "odd",
                        keys=[f"key-{i}"],
                        properties={"n": str(i)},
                        queue_id=i % queues,
                    )
                ],
            )
            self.clock.advance(100)
        self.store.dispatch_until_caught_up()

    def upload(self, *, force: bool = True) -> UploadResult:
        total = UploadResult()
        while True:
            result = upload_step(self.store, self.tier, force=force)
            assert not result.errors, result.errors
            total.messages_committed += result.messages_committed
            total.messages_appended += result.messages_appended
            total.keys_indexed += result.keys_indexed
            if not result.progressed:
                return total

    def delete_local(self) -> None:
        """Every CommitLog file but the last, by the cleanup step's forced path."""
        state = CleanupState()
        for _ in range(100):
            result = cleanup.step(
                self.store, state, self.clock, probe=lambda _p: 0.86, first_delay_ms=0
            )
            assert result.status == "ok", result
            if len(self.store.commit_log.segments.files) == 1:
                cleanup.step(self.store, state, self.clock, probe=lambda _p: 0.1, first_delay_ms=0)
                return
        raise AssertionError("cleanup did not delete the old CommitLog files")

    def close(self) -> None:
        self.broker.close()
        self.store.close()


def open_world(
    root: Path,
    backend: SegmentBackend,
    clock: FakeClock,
    config: TieredConfig = EAGER,
    *,
    store_config: StoreConfig = SMALL,
    memory_bytes: int | None = None,
) -> World:
    store = MessageStore(root / "store", store_config, clock=clock).open()
    metadata = Metadata(root / "store" / "config", clock)
    metadata.load()
    tier = TieredStorage(backend, root / "store", config, clock=clock)
    tiered = TieredMessageStore(store, tier, memory_bytes=memory_bytes)
    broker = Broker(store, metadata, clock=clock, reader=tiered)
    broker.start()
    if metadata.topics.get(TOPIC) is None:
        broker.admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
    return World(store, tier, tiered, broker, clock)


def with_strategy(world: World, **changes: object) -> TieredMessageStore:
    """A second reader over the same tier with other read settings."""
    config = dataclasses.replace(world.tier.config, **changes)  # type: ignore[arg-type]
    tier = TieredStorage(
        world.tier.backend, world.store.root, config, clock=world.clock, readonly=True
    )
    return TieredMessageStore(world.store, tier, memory_bytes=world.tiered.memory_bytes)
