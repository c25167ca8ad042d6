"""Which CommitLog segments a cleanup run may delete, and why (spec 6.4 step 3, issue 17).

A cleanup run that deletes at all (in the ``delete_when`` hours, when armed by hand, or when
the disk check asks for it) walks the segments oldest first and stops at the first one that
must stay (no holes), never the last. For each::

    segment                       run's cause          operator opted in    verdict
    older than the retention      delete_when/manual   either               delete: expired
    older than the retention      disk pressure        yes                  delete: expired
    older than the retention      disk pressure        no                   delete: expired,
                                                                            unless a consumer
                                                                            still needs it
    younger than the retention    disk over the        yes                  delete: forced
                                  force ratio (85%)
    younger than the retention    anything else        either               keep

The retention is ``file_reserved_time_hours`` (72 h) against the file's mtime; "a consumer
still needs it" means the lowest CommitLog offset some subscribed group (or the delay
service) has not consumed (``consumed.py``) lies inside the segment or before it. The opt-in
is ``StoreConfig.disk_clean_forcibly_unconsumed`` (``CAIRN_DISK_CLEAN_FORCIBLY_UNCONSUMED``):
RocketMQ's own behaviour, which deletes everything but the last segment under pressure. By
default forced cleanup never deletes a message younger than the retention, nor one a
consumer has not read under pressure: the broker refuses puts instead (a full disk is
recoverable, a deleted message is not), and :attr:`SegmentPolicy.held_back` says why, for
the log and the health condition.

When what consumers need cannot be worked out (the callable failed), nothing is deleted
under pressure that it would have guarded.

Thread-safety: one policy per run, used by the cleaner thread only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from mqcore.services.consumed import Needed, NeededOffset
from mqcore.services.deletions import Deletion
from mqcore.store.files.mapped_file import MappedFile

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
OPT_IN_SETTING = "CAIRN_DISK_CLEAN_FORCIBLY_UNCONSUMED"


class _Unknown:
    """What consumers need could not be worked out."""


_UNKNOWN = _Unknown()


@dataclass
class SegmentPolicy:
    """The verdicts of one cleanup run (module docstring).

    Args:
        now_ms: the run's time.
        retention_ms: ``file_reserved_time_hours`` in ms.
        pressure: the run deletes because of the disk check (not the hour, not by hand).
        clean_immediately: the disk is over the force ratio.
        opt_in: the operator allows forced deletion of what consumers need.
        needed: what consumers still need (None: no consumer is known; nothing guarded).
        usage: the disk usage measured for the run (for the records).
    """

    now_ms: int
    retention_ms: int
    pressure: bool
    clean_immediately: bool
    opt_in: bool
    needed: NeededOffset | None
    usage: float
    #: Why the first segment kept was kept, when it matters ("" otherwise).
    held_back: str = ""
    #: The same fact without its changing figures (the file and the rule): logged on change.
    held_back_key: str = ""
    _decided: dict[int, Deletion] = field(default_factory=dict)
    _lowest: Needed | None | _Unknown = None
    _looked: bool = False

    def may_delete(self, mapped: MappedFile) -> bool:
        """The verdict for ``mapped`` (the next segment from the front). A segment allowed
        gets its :class:`Deletion` ready for :meth:`deletion_of`."""
        age_ms = self.now_ms - mapped.last_modified_ms
        end = mapped.base_offset + mapped.wrote_position
        facts: dict[str, Any] = {
            "age_hours": round(age_ms / HOUR_MS, 4),
            "retention_hours": round(self.retention_ms / HOUR_MS, 4),
            "disk_usage": self.usage,
            "under_pressure": self.pressure,
        }
        if age_ms >= self.retention_ms:
            reason = "expired"
            if self.pressure and not self.opt_in:
                lowest = self._lowest_needed()
                if isinstance(lowest, _Unknown) or (
                    lowest is not None and lowest.phys_offset < end
                ):
                    why = (
                        "what consumers still need is unknown"
                        if isinstance(lowest, _Unknown)
                        else lowest.describe()
                    )
                    self._hold(
                        mapped, end, "unconsumed", f"it holds messages not consumed yet: {why}"
                    )
                    return False
                facts["needed_from"] = lowest.describe() if lowest is not None else None
        elif self.clean_immediately and self.opt_in:
            reason = "forced"
            lowest = self._lowest_needed()
            facts["needed_from"] = lowest.describe() if isinstance(lowest, Needed) else None
        else:
            if self.clean_immediately:
                self._hold(
                    mapped,
                    end,
                    "young",
                    f"it is younger than the retention ({facts['age_hours']} h of "
                    f"{facts['retention_hours']} h)",
                )
            return False
        self._decided[id(mapped)] = Deletion(
            mapped.path.name, mapped.base_offset, end, reason, self.now_ms, facts
        )
        return True

    def deletion_of(self, mapped: MappedFile) -> Deletion:
        """The record of a segment :meth:`may_delete` allowed."""
        return self._decided[id(mapped)]

    def _lowest_needed(self) -> Needed | None | _Unknown:
        if not self._looked:
            self._looked = True
            try:
                self._lowest = self.needed() if self.needed is not None else None
            except Exception:  # noqa: BLE001 - logged; guarded segments are kept meanwhile
                log.exception("cleanup: cannot work out what consumers still need")
                self._lowest = _UNKNOWN
        return self._lowest

    def _hold(self, mapped: MappedFile, end: int, rule: str, why: str) -> None:
        self.held_back_key = f"{mapped.path.name}:{rule}"
        self.held_back = (
            f"forced cleanup keeps CommitLog segment {mapped.path.name} (offsets "
            f"{mapped.base_offset}..{end}): {why}; free space, lower the retention or set "
            f"{OPT_IN_SETTING}=true to let cleanup delete it"
        )
