"""The disk guard: disk usage as RocketMQ's cleanup service measures it (spec 6.4 step 1),
and what the store does about it.

:func:`check_disk` measures the partitions of the CommitLog and the ConsumeQueues;
:func:`publish_disk` acts on the result: over the warning ratio (90 %) the store refuses
puts (source ``disk``, reason "disk full: the CommitLog partition is 93% used ...") and
shows the health condition ``disk-full``; back under it, puts are accepted again and a
refusal an append made for lack of space (source ``space``) is lifted too.

Two runners use them. The cleanup step measures before deciding what to delete (every
``CAIRN_CLEAN_INTERVAL_MS``, 10 s). :func:`guard_step` measures on its own, from the first
second after the start (no first delay) and every second after (``GUARD_INTERVAL_S``), in
the broker process whatever ``CAIRN_SERVICES`` says: a broker filling its disk learns of it
within a second, and one started on a full disk refuses puts from its first put; once space
is freed (cleanup, or an operator deleting a file) puts resume within a second, without a
restart. Each check costs two ``statvfs`` calls (a few microseconds). While the disk is over
the warning ratio the guard wakes the cleanup runner (``on_full``), so deletion, when it is
allowed, runs every second instead of every ten.

The probe is a plain function so that tests hand the steps a fake one and drive them
through every threshold without filling a disk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mqcore.services.result import StepResult
from mqcore.store.config import StoreConfig
from mqcore.store.files.space import usage_ratio
from mqcore.store.sharing.progress import DISK_FULL, LOGIC_DISK_FULL, Slot
from mqcore.store.store import MessageStore

__all__ = [
    "GUARD_INTERVAL_S",
    "DiskCheck",
    "DiskProbe",
    "Thresholds",
    "check_disk",
    "guard_step",
    "publish_disk",
    "usage_ratio",
]

#: How often the guard measures (the issue's "at least every second").
GUARD_INTERVAL_S = 1.0

#: ``path -> used fraction (0..1)`` of the partition holding ``path``.
DiskProbe = Callable[[str], float]


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The three ratios as fractions, clamped as RocketMQ's getters clamp them."""

    max_used: float  # diskMaxUsedSpaceRatio, 10..95 %: clean (not immediately) above it
    warning: float  # diskSpaceWarningLevelRatio, 0.35..0.90: disk full, refuse puts
    force: float  # diskSpaceCleanForciblyRatio, 0.30..0.85: clean immediately

    @classmethod
    def of(cls, config: StoreConfig) -> Thresholds:
        return cls(
            max_used=min(95, max(10, config.disk_max_used_space_ratio)) / 100,
            warning=min(0.90, max(0.35, config.disk_space_warning_level_ratio / 100)),
            force=min(0.85, max(0.30, config.disk_space_clean_forcibly_ratio / 100)),
        )


@dataclass(frozen=True, slots=True)
class DiskCheck:
    """One measurement of both partitions against the thresholds."""

    commit_log_usage: float
    queue_usage: float
    disk_full: bool  # CommitLog partition over the warning ratio
    logic_disk_full: bool  # ConsumeQueue partition over the warning ratio
    clean_immediately: bool  # either over the force ratio
    triggered: bool  # either over the max-used ratio: deletion runs at any hour

    @property
    def full(self) -> bool:
        return self.disk_full or self.logic_disk_full

    def reason(self, thresholds: Thresholds) -> str:
        if not self.full:
            return ""
        which, usage = (
            ("CommitLog", self.commit_log_usage)
            if self.disk_full
            else ("ConsumeQueue", self.queue_usage)
        )
        return (
            f"disk full: the {which} partition is {usage:.0%} used, over the warning ratio "
            f"{thresholds.warning:.0%}; puts are refused until space is freed"
        )


def check_disk(store: MessageStore, probe: DiskProbe, thresholds: Thresholds) -> DiskCheck:
    """Spec 6.4 step 1 for both partitions.

    Raises:
        OSError: a partition cannot be measured.
    """
    log_usage = probe(str(store.root / "commitlog"))
    queue_usage = probe(str(store.root / "consumequeue"))
    full = log_usage > thresholds.warning
    logic_full = queue_usage > thresholds.warning
    immediately = max(log_usage, queue_usage) > thresholds.force
    triggered = immediately or max(log_usage, queue_usage) > thresholds.max_used
    return DiskCheck(log_usage, queue_usage, full, logic_full, immediately, triggered)


def publish_disk(
    store: MessageStore, disk: DiskCheck, thresholds: Thresholds, *, progress: bool = True
) -> None:
    """Refuse or accept puts by ``disk`` (module docstring); with ``progress``, also publish
    the usage and the disk-full flags for the other processes (Celery mode: the worker's
    cleanup tells the broker; a broker's own guard leaves those slots to the worker).
    A worker's store ignores the refusal itself."""
    store.set_writable(not disk.full, disk.reason(thresholds), source="disk")
    if not disk.full:
        store.set_writable(True, "", source="space")  # an append may try to reserve again
    slots = store.progress
    if progress and slots is not None:
        flags = (DISK_FULL if disk.disk_full else 0) | (
            LOGIC_DISK_FULL if disk.logic_disk_full else 0
        )
        slots.set(Slot.DISK_USAGE_PPM, int(disk.commit_log_usage * 1_000_000))
        slots.set(Slot.DISK_FLAGS, flags)


def guard_step(
    store: MessageStore,
    *,
    probe: DiskProbe = usage_ratio,
    on_full: Callable[[], None] | None = None,
) -> StepResult:
    """Measure the disk and refuse or accept puts accordingly (module docstring); call
    ``on_full`` while it is over the warning ratio. Thread-safe; cheap enough for every
    second.

    Returns:
        The figures, in ``detail``.

    Raises:
        OSError: a partition cannot be measured.
    """
    thresholds = Thresholds.of(store.config)
    disk = check_disk(store, probe, thresholds)
    publish_disk(store, disk, thresholds, progress=store.role == "standalone")
    if disk.full and on_full is not None:
        on_full()
    return StepResult(
        "disk_guard",
        progressed=False,
        detail={
            "commit_log_usage": disk.commit_log_usage,
            "queue_usage": disk.queue_usage,
            "disk_full": disk.full,
            "writable": store.writable,
            "unwritable_reason": store.unwritable_reason,
        },
    )
