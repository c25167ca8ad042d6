"""Disk usage, as RocketMQ's cleanup service measures it (spec 6.4 step 1).

The probe is a plain function so that tests hand the cleanup step a fake one and drive it
through every threshold without filling a disk.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

from mqcore.store.config import StoreConfig

#: ``path -> used fraction (0..1)`` of the partition holding ``path``.
DiskProbe = Callable[[str], float]


def usage_ratio(path: str) -> float:
    """``ceil(used * 100 / (used + usable)) / 100`` (RocketMQ ``UtilAll.getDiskPartitionSpaceUsedPercent``).

    ``usable`` is what an unprivileged writer may still use (``f_bavail``), so the root
    reserve counts as used, as Java's ``File.getUsableSpace`` has it. A path that does not
    exist yet is measured at its nearest existing parent.

    Raises:
        OSError: no parent of ``path`` can be measured.
    """
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return 0.0
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = st.f_bavail * st.f_frsize
    if used + usable <= 0:
        return 0.0
    return math.ceil(used * 100 / (used + usable)) / 100


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
