"""The store's health (:mod:`mqcore.store.health`) as ``GET /status`` shows it, the
acknowledgement request and its answer, and the counts ``/healthz`` gives.

Problems (kept until an operator acknowledges them) and conditions (holding now, clearing by
themselves) come from the running store's :class:`~mqcore.store.health.StoreHealth`; this
module turns them into plain JSON. A problem's ``detail`` is whatever its reporter recorded
(file, position, length, reason ...): it is passed through JSON once so that a value JSON
cannot hold becomes its text instead of breaking the status page.
"""

from __future__ import annotations

import json
from typing import Any

from rest_framework import serializers

from mqcore.store.health import Condition, Problem, StoreHealth
from shared.serializers.common import StrictSerializer

#: ``GET /status`` lists this many acknowledged problems, the most recently acknowledged
#: first (``health.json`` keeps up to :data:`mqcore.store.health.MAX_ACKNOWLEDGED`).
ACKNOWLEDGED_SHOWN = 20
#: Ids one acknowledgement may name.
MAX_ACKNOWLEDGE_IDS = 1000
MAX_ID_LENGTH = 300


class StoreProblemSerializer(serializers.Serializer):
    """Something that went wrong in the store; it counts until acknowledged."""

    id = serializers.CharField(
        help_text="stable for the same fact, e.g. quarantine:00000000000004194304"
    )
    kind = serializers.CharField(
        help_text="quarantine, config_recovered, derived_rebuilt, forced_cleanup, ..."
    )
    summary = serializers.CharField(help_text="one line for an operator")
    detail = serializers.DictField(help_text="the facts: file, position, length, reason, ...")
    first_seen_ms = serializers.IntegerField(help_text="when it was first reported (epoch ms)")


class AcknowledgedProblemSerializer(StoreProblemSerializer):
    acknowledged_ms = serializers.IntegerField(help_text="epoch ms")
    acknowledged_by = serializers.CharField(help_text="user name")


class StoreConditionSerializer(serializers.Serializer):
    """Something that holds now and clears by itself (disk full, rebuilding files ...)."""

    id = serializers.CharField()
    kind = serializers.CharField(help_text="disk_full, rebuilding, ...")
    summary = serializers.CharField()
    detail = serializers.DictField()
    since_ms = serializers.IntegerField(help_text="when it started (epoch ms)")
    progress = serializers.FloatField(
        allow_null=True, min_value=0, max_value=1, help_text="0..1 when it has one"
    )


class StoreHealthSerializer(serializers.Serializer):
    status = serializers.ChoiceField(
        ["ok", "degraded"],
        help_text="degraded while a problem is unacknowledged or a condition holds",
    )
    problems = StoreProblemSerializer(many=True, help_text="open problems, oldest first")
    conditions = StoreConditionSerializer(many=True, help_text="oldest first")
    acknowledged = AcknowledgedProblemSerializer(
        many=True,
        help_text=f"the {ACKNOWLEDGED_SHOWN} most recently acknowledged problems, newest first",
    )


def _plain(detail: dict[str, Any]) -> dict[str, Any]:
    plain: dict[str, Any] = json.loads(json.dumps(detail, default=str))
    return plain


def problem_dict(p: Problem) -> dict[str, Any]:
    return {
        "id": p.id,
        "kind": p.kind,
        "summary": p.summary,
        "detail": _plain(p.detail),
        "first_seen_ms": p.first_seen_ms,
    }


def acknowledged_dict(p: Problem) -> dict[str, Any]:
    return problem_dict(p) | {
        "acknowledged_ms": p.acknowledged_ms or 0,
        "acknowledged_by": p.acknowledged_by or "",
    }


def condition_dict(c: Condition) -> dict[str, Any]:
    return {
        "id": c.id,
        "kind": c.kind,
        "summary": c.summary,
        "detail": _plain(c.detail),
        "since_ms": c.since_ms,
        "progress": None if c.progress is None else min(1.0, max(0.0, float(c.progress))),
    }


def recently_acknowledged(health: StoreHealth, limit: int = ACKNOWLEDGED_SHOWN) -> list[Problem]:
    done = [p for p in health.problems(include_acknowledged=True) if p.acknowledged]
    done.sort(key=lambda p: (p.acknowledged_ms or 0, p.id), reverse=True)
    return done[:limit]


def health_dict(health: StoreHealth) -> dict[str, Any]:
    """``{"status", "problems", "conditions", "acknowledged"}`` (:class:`StoreHealthSerializer`)."""
    problems = health.problems()
    conditions = health.conditions()
    return {
        "status": "degraded" if problems or conditions else "ok",
        "problems": [problem_dict(p) for p in problems],
        "conditions": [condition_dict(c) for c in conditions],
        "acknowledged": [acknowledged_dict(p) for p in recently_acknowledged(health)],
    }


def health_counts(health: StoreHealth | None) -> dict[str, Any]:
    """What ``/healthz`` shows: ``{"status", "problems", "conditions"}`` with counts only
    (no ids, files or details: ``/healthz`` needs no login). No open store: ``ok`` and 0."""
    if health is None:
        return {"status": "ok", "problems": 0, "conditions": 0}
    problems = len(health.problems())
    conditions = len(health.conditions())
    return {
        "status": "degraded" if problems or conditions else "ok",
        "problems": problems,
        "conditions": conditions,
    }


# -- acknowledging --------------------------------------------------------------------------


class AcknowledgeSerializer(StrictSerializer):
    """Either `ids` (the problems to acknowledge) or `all: true` (every open one)."""

    ids = serializers.ListField(
        child=serializers.CharField(max_length=MAX_ID_LENGTH),
        required=False,
        min_length=1,
        max_length=MAX_ACKNOWLEDGE_IDS,
        help_text="problem ids from GET /status (health.problems[].id)",
    )
    all = serializers.BooleanField(required=False, help_text="true: every open problem")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "ids" in attrs and "all" in attrs:
            raise serializers.ValidationError(
                {"all": [serializers.ErrorDetail("not allowed with ids", code="exclusive")]}
            )
        if "ids" not in attrs and not attrs.get("all"):
            field = "all" if "all" in attrs else "ids"
            raise serializers.ValidationError(
                {
                    field: [
                        serializers.ErrorDetail(
                            "give the ids to acknowledge, or all: true", code="required"
                        )
                    ]
                }
            )
        return attrs


class AcknowledgeResultSerializer(serializers.Serializer):
    acknowledged = AcknowledgedProblemSerializer(
        many=True, help_text="the problems this request acknowledged"
    )
    already_acknowledged = AcknowledgedProblemSerializer(
        many=True, help_text="ids given that were acknowledged before (nothing changed)"
    )
    health = StoreHealthSerializer(help_text="the store's health afterwards")
