"""DerivedViews: the derived files as one process sees them, replaced and retired."""

from __future__ import annotations

from pathlib import Path

from mqcore.clock import FakeClock
from mqcore.store import StoreConfig
from mqcore.store.recovery.checkpoint import Checkpoint
from mqcore.store.sharing.derived_views import RETIRE_AFTER_S, DerivedViews

CONFIG = StoreConfig(consume_queue_file_entries=10, index_hash_slots=5, index_max_entries=4)


class Ticks:
    """A monotonic time source the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def loaded(root: Path, ticks: Ticks | None = None) -> DerivedViews:
    views = DerivedViews(root, CONFIG, FakeClock(), readonly=False, monotonic=ticks or Ticks())
    views.queues.load()
    views.index.load(True, 0)
    return views


def test_a_filled_index_file_moves_the_checkpoint_of_the_current_view(tmp_path: Path) -> None:
    views = loaded(tmp_path)
    views.load_checkpoint()
    replaced = views.checkpoint
    for i in range(12):  # 4 entries a file: the first files fill
        views.index.build_index("T", 100 * i, 1_000 + i, f"u{i}", f"k{i}", 0)
    assert len(views.index.files) >= 2
    assert views.checkpoint is replaced
    assert views.checkpoint.index_msg_timestamp == views.index.files[-2].end_timestamp > 1_000


def test_load_checkpoint_reads_what_another_process_wrote(tmp_path: Path) -> None:
    views = loaded(tmp_path)
    other = Checkpoint(tmp_path / "checkpoint")
    other.logics_msg_timestamp = 1234
    other.flush()
    assert views.checkpoint.logics_msg_timestamp == 0
    assert views.load_checkpoint().logics_msg_timestamp == 1234
    assert views.checkpoint.logics_msg_timestamp == 1234


def test_replaced_views_stay_open_for_readers_then_close(tmp_path: Path) -> None:
    ticks = Ticks()
    views = loaded(tmp_path, ticks)
    views.index.build_index("T", 0, 1_000, "u0", "k0", 0)
    first = views.index
    assert len(first.files) == 1
    second = views.new_index(readonly=True)
    second.load(True, 0)
    views.replace(index=second)
    assert views.index is second
    assert views.retired_count == 1
    assert len(first.files) == 1  # a query that picked it up still reads it
    ticks.now += RETIRE_AFTER_S - 0.1
    views.retire()
    assert len(first.files) == 1
    ticks.now += 0.1
    views.retire()  # the next replacement closes what was retired long enough ago
    assert first.files == []
    assert views.retired_count == 0


def test_close_old_and_close_retired_close_at_once(tmp_path: Path) -> None:
    views = loaded(tmp_path)
    views.index.build_index("T", 0, 1_000, "u0", "k0", 0)
    first = views.index
    fresh = views.new_index(readonly=False)
    fresh.load(True, 0)
    views.replace(index=fresh, close_old=True)
    assert first.files == [] and views.retired_count == 0
    queues = views.new_queues(readonly=False)
    queues.load()
    views.replace(queues=queues)
    assert views.retired_count == 1
    views.close_retired()
    assert views.retired_count == 0
    views.close()
    assert views.index.files == []
