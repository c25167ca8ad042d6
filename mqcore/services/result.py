from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "skipped", "error"]


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one run of a service step did.

    Attributes:
        service: the service's name (``reput``, ``flush``, ...).
        progressed: it did work; a runner calls it again at once instead of waiting.
        status: ``skipped`` when another runner holds the service's lock.
        detail: figures for status pages (JSON-serialisable).
    """

    service: str
    progressed: bool
    status: Status = "ok"
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "progressed": self.progressed,
            "status": self.status,
            "detail": dict(self.detail),
        }
