"""Tiered storage progress (spec 10): per-queue rows, totals, and the summary the broker
status and the console show.

The figures come from :meth:`cairn.runtime.BrokerRuntime.tier_status` (one dict per queue);
this module only adds what a reader wants next to them: messages held in the tier
(``commit_offset - tier_min_offset``), totals, the backend and the read strategy.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from cairn import env
from cairn.runtime import BrokerRuntime
from mqcore.tiered.config import BACKENDS

#: Row keys :meth:`BrokerRuntime.tier_status` gives, in the order tables show them.
QUEUE_KEYS = (
    "topic",
    "queue_id",
    "tier_min_offset",
    "dispatch_offset",
    "commit_offset",
    "local_max_offset",
    "lag",
    "size_bytes",
)


class TierQueueSerializer(serializers.Serializer):
    """One queue's upload progress (queue offsets)."""

    topic = serializers.CharField()
    queue_id = serializers.IntegerField()
    tier_min_offset = serializers.IntegerField(help_text="first offset the tier holds")
    dispatch_offset = serializers.IntegerField(
        help_text="end of what was copied to the tier, uploaded or not"
    )
    commit_offset = serializers.IntegerField(
        help_text="end of what is durably uploaded (the uploaded offset); reads are served below it"
    )
    local_max_offset = serializers.IntegerField(help_text="the local queue's max offset")
    lag = serializers.IntegerField(help_text="messages not uploaded yet: local max - commit")
    size_bytes = serializers.IntegerField(
        help_text="bytes in the tier: flat CommitLog, flat ConsumeQueue and key index"
    )
    messages = serializers.IntegerField(help_text="messages the tier holds: commit - tier min")


class TierTotalsSerializer(serializers.Serializer):
    queues = serializers.IntegerField()
    messages = serializers.IntegerField(help_text="messages the tier holds, all queues")
    lag = serializers.IntegerField(help_text="messages not uploaded yet, all queues")
    size_bytes = serializers.IntegerField()


class TierSummarySerializer(TierTotalsSerializer):
    """Whether tiered storage is on, where it uploads and how reads use it, with totals."""

    enabled = serializers.BooleanField()
    backend = serializers.ChoiceField(list(BACKENDS))
    read_strategy = serializers.CharField(
        allow_null=True, help_text="DISABLE, NOT_IN_DISK, NOT_IN_MEM or FORCE; null when off"
    )


class TieredStatusSerializer(serializers.Serializer):
    """``GET /tiered``: the summary and every tiered queue's progress."""

    enabled = serializers.BooleanField()
    backend = serializers.ChoiceField(list(BACKENDS))
    read_strategy = serializers.CharField(allow_null=True)
    totals = TierTotalsSerializer()
    queues = TierQueueSerializer(many=True)


def queue_rows(rt: BrokerRuntime, topic: str | None = None) -> list[dict[str, Any]]:
    """The runtime's per-queue rows (optionally of one topic), with ``messages``."""
    rows = []
    for row in rt.tier_status():
        if topic is not None and row["topic"] != topic:
            continue
        out = {key: row[key] for key in QUEUE_KEYS}
        out["messages"] = max(0, row["commit_offset"] - row["tier_min_offset"])
        rows.append(out)
    return rows


def backend_name(rt: BrokerRuntime) -> str:
    """The backend the runtime opened (``none`` when tiered storage is off)."""
    if rt.tiered is None:
        return "none"
    return (rt.tiered_backend or env.get("CAIRN_TIERED_BACKEND", "none")).lower()


def summary(rt: BrokerRuntime, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Totals over ``rows`` (default: every tiered queue), backend and read strategy."""
    tiered = rt.tiered
    if rows is None:
        rows = queue_rows(rt)
    return {
        "enabled": tiered is not None,
        "backend": backend_name(rt),
        "read_strategy": tiered.config.read_strategy.name if tiered is not None else None,
        **totals(rows),
    }


def totals(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {
        "queues": len(rows),
        "messages": sum(r["messages"] for r in rows),
        "lag": sum(r["lag"] for r in rows),
        "size_bytes": sum(r["size_bytes"] for r in rows),
    }


def tiered_status(rt: BrokerRuntime, topic: str | None = None) -> dict[str, Any]:
    """The ``GET /tiered`` body: ``{"enabled": false, ..., "queues": []}`` when off."""
    rows = queue_rows(rt, topic)
    head = summary(rt, rows)
    return {
        "enabled": head["enabled"],
        "backend": head["backend"],
        "read_strategy": head["read_strategy"],
        "totals": totals(rows),
        "queues": rows,
    }
