"""Acknowledging store problems: the one way the REST API and the console both take.

An operator acknowledges the problems they have read (:mod:`mqcore.store.health`): the store
stops counting them (``/healthz`` and the status go back to ``ok`` once nothing else is open)
but keeps them, with who acknowledged them and when, in ``<store>/health.json``. Each
acknowledged problem writes one audit entry, action ``problem.acknowledge``, target type
``problem``, target the problem id, with its summary, kind, detail and first-seen time.

Named ids are all checked first: if any is unknown (never reported, or so long acknowledged
that the history dropped it) nothing is acknowledged. An id acknowledged before is not an
error (a retried request, or two operators at once): it is listed apart and changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from accounts import audit
from mqcore.store.health import Problem, StoreHealth
from shared.serializers.health import problem_dict

ACTION = "problem.acknowledge"
TARGET_TYPE = "problem"


@dataclass
class Acknowledgement:
    """What one acknowledgement did (``unknown``: ``(index, id)`` of the ids nobody reported;
    when there are any, nothing was acknowledged)."""

    acknowledged: list[Problem] = field(default_factory=list)
    already_acknowledged: list[Problem] = field(default_factory=list)
    unknown: list[tuple[int, str]] = field(default_factory=list)


def acknowledge(
    health: StoreHealth, request: Any, ids: Sequence[str] | None, by: str
) -> Acknowledgement:
    """Acknowledge ``ids`` (every open problem when None) as user ``by``, auditing each one
    acknowledged through ``request``."""
    if ids is None:
        done = health.acknowledge(None, by)
        _audit(request, done)
        return Acknowledgement(acknowledged=done)
    known = {p.id: p for p in health.problems(include_acknowledged=True)}
    unknown = [(i, pid) for i, pid in enumerate(ids) if pid not in known]
    if unknown:
        return Acknowledgement(unknown=unknown)
    wanted = list(dict.fromkeys(ids))
    done = health.acknowledge(wanted, by)
    _audit(request, done)
    acked_now = {p.id for p in done}
    # Acknowledged before this call, or by someone else between the check and now.
    before = [p for p in health.problems(include_acknowledged=True) if p.id in wanted]
    return Acknowledgement(
        acknowledged=done,
        already_acknowledged=[p for p in before if p.id not in acked_now and p.acknowledged],
    )


def _audit(request: Any, problems: list[Problem]) -> None:
    for p in problems:
        audit.record(
            request,
            ACTION,
            TARGET_TYPE,
            p.id,
            old={"acknowledged": False},
            new=problem_dict(p)
            | {
                "acknowledged": True,
                "acknowledged_ms": p.acknowledged_ms,
                "acknowledged_by": p.acknowledged_by,
            },
        )
