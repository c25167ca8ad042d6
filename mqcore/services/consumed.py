"""What consumers still need: the lowest CommitLog offset a group has not consumed yet.

Cleanup under disk pressure must not delete a CommitLog segment holding a message some
subscribed group has not consumed (issue 17). What a group has consumed is its committed
offset per queue (``consumerOffset.json``, the broker's offset table: the *next* queue offset
it will read); the delay-delivery service's progress per delay level (``delayOffset.json``)
counts the same way for the messages still waiting in ``SCHEDULE_TOPIC_XXXX``. Each of those
queue offsets maps to a CommitLog offset through its ConsumeQueue unit, and the lowest of
them is where the data still needed starts: a segment ending at or below it holds nothing
anybody still needs.

A committed offset at or past the queue's end needs nothing; one below the queue's minimum
(its messages expired already) needs from the minimum on; blank units (records lost or
quarantined) are skipped to the next real one.

The cleanup step (``cleanup.py``) gets this as a callable, :data:`NeededOffset`, so it needs
neither the broker nor Django:

* the broker process passes ``lambda: lowest_needed(store, committed_of(metadata))`` over
  the broker's live offset tables (``Metadata``, in memory, newer than the files);
* a Celery worker passes :func:`from_config_dir`, which reads the persisted files on every
  call (the broker persists offsets every 5 s: a group is seen at most that far behind,
  which only ever keeps more data, never less).

Cost: one ConsumeQueue unit read per committed (group, queue), a few microseconds each;
the cleanup runs every 10 s (every second while the disk is full).

Thread-safety: the functions read thread-safe structures only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from mqcore.clock import Clock
from mqcore.metadata import Metadata
from mqcore.metadata.delay_offsets import DelayOffsetManager
from mqcore.metadata.offsets import ConsumerOffsetManager
from mqcore.metadata.topics import SCHEDULE_TOPIC
from mqcore.store.consume_queue import BLANK_SIZE, ConsumeQueue
from mqcore.store.store import MessageStore

#: Who committed ``(topic, queue_id)`` up to ``next_offset``: a group name, or
#: ``delay level N`` for the delay-delivery service.
Committed = tuple[str, str, int, int]  # (owner, topic, queue_id, next_offset)

#: Units read at a time while skipping blank units.
_UNITS_PER_READ = 64


@dataclass(frozen=True, slots=True)
class Needed:
    """The first message some consumer still needs, and whose need it is."""

    phys_offset: int
    owner: str
    topic: str
    queue_id: int
    queue_offset: int

    def describe(self) -> str:
        return (
            f"{self.owner} has not consumed {self.topic} queue {self.queue_id} from offset "
            f"{self.queue_offset} (CommitLog offset {self.phys_offset})"
        )


#: The cleanup step's view: the lowest need now, or None when nobody needs anything.
NeededOffset = Callable[[], Needed | None]


def lowest_needed(store: MessageStore, committed: Iterable[Committed]) -> Needed | None:
    """The lowest CommitLog offset among the messages ``committed`` says are not consumed
    yet (module docstring), or None if every consumer is caught up."""
    lowest: Needed | None = None
    for owner, topic, queue_id, next_offset in committed:
        queue = store.queues.get(topic, queue_id)
        if queue is None:
            continue
        found = _first_unit_phys(queue, next_offset)
        if found is None:
            continue
        queue_offset, phys_offset = found
        if lowest is None or phys_offset < lowest.phys_offset:
            lowest = Needed(phys_offset, owner, topic, queue_id, queue_offset)
    return lowest


def _first_unit_phys(queue: ConsumeQueue, from_offset: int) -> tuple[int, int] | None:
    """``(queue_offset, phys_offset)`` of the first real unit at or after ``from_offset``."""
    offset = max(from_offset, queue.min_offset)
    end = queue.max_offset
    while offset < end:
        units = queue.units(offset, _UNITS_PER_READ)
        if not units:
            return None  # the file went away under us: cleanup will look again
        for unit in units:
            if not (unit.phys_offset == 0 and unit.size == BLANK_SIZE):
                return unit.queue_offset, unit.phys_offset
        offset = units[-1].queue_offset + 1
    return None


def committed_of(store: MessageStore, metadata: Metadata) -> list[Committed]:
    """Every committed offset of ``metadata``'s groups on the topics ``store`` holds, and
    the delay service's progress on every delay queue (a level that never ran needs its
    whole queue)."""
    return _committed(store, metadata.offsets, metadata.delay_offsets)


def _committed(
    store: MessageStore, offsets: ConsumerOffsetManager, delays: DelayOffsetManager
) -> list[Committed]:
    out: list[Committed] = []
    for topic in store.queues.topics():
        if topic == SCHEDULE_TOPIC:
            for queue_id in store.queues.queues(topic):
                level = queue_id + 1
                out.append((f"delay level {level}", topic, queue_id, delays.get(level)))
            continue
        for group in offsets.groups_of_topic(topic):
            for queue_id, next_offset in offsets.offsets_for(group, topic).items():
                out.append((f"group {group}", topic, queue_id, next_offset))
    return out


def from_config_dir(store: MessageStore, config_dir: Path, clock: Clock) -> NeededOffset:
    """A :data:`NeededOffset` reading ``consumerOffset.json`` and ``delayOffset.json`` from
    ``config_dir`` on each call (a Celery worker, which has no live offset table)."""

    def needed() -> Needed | None:
        offsets = ConsumerOffsetManager(config_dir, clock)
        delays = DelayOffsetManager(config_dir, clock)
        offsets.load()
        delays.load()
        return lowest_needed(store, _committed(store, offsets, delays))

    return needed
