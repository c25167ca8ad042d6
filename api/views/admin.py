"""Broker status (with the store's health), acknowledging store problems, and the audit log."""

from __future__ import annotations

from datetime import UTC, datetime

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

import mqcore
from accounts.models import AuditEntry
from accounts.roles import OPERATOR
from api.views.base import BrokerView, paginate
from api.views.schema import request_example, responses
from cairn import runtime
from mqcore.errors import NotFoundError
from mqcore.store.health import StoreHealth
from shared import health as store_health
from shared.serializers import tiered
from shared.serializers.admin import (
    AuditEntrySerializer,
    AuditPageSerializer,
    AuditQuerySerializer,
    StatusSerializer,
    status_dict,
)
from shared.serializers.health import (
    AcknowledgeResultSerializer,
    AcknowledgeSerializer,
    acknowledged_dict,
    health_dict,
)


class StatusView(BrokerView):
    @extend_schema(
        summary="Broker status",
        description="Store size, disk usage, messages per second over the last minute, "
        "each in-process service's state, tiered storage totals (`tier`), and the store's "
        "health (`health`): `degraded` while a problem (a quarantined CommitLog range, a "
        "config file recovered from an older copy, a rebuilt derived file ...) is "
        "unacknowledged or a condition (disk full, files being rebuilt, with progress) "
        "holds.",
        responses=responses({200: StatusSerializer}, 401, 403, 503),
    )
    def get(self, request: Request) -> Response:
        rt = runtime.current()
        broker = self.broker
        status = broker.status(services=rt.service_states())
        body = status_dict(status, mqcore.__version__, rt.services_mode)
        body["tier"] = tiered.summary(rt)
        body["health"] = health_dict(broker.store.health)
        return Response(body)


class AcknowledgeView(BrokerView):
    """Operators and admins acknowledge store problems (module :mod:`shared.health`)."""

    @extend_schema(
        summary="Acknowledge store problems",
        description='`{"ids": [...]}` acknowledges those problems (ids from '
        '`GET /status`, `health.problems[].id`), `{"all": true}` every open one. An '
        "acknowledged problem no longer makes the store `degraded`; it stays in "
        "`health.acknowledged` with who acknowledged it and when, and each one is written "
        "to the audit log (`problem.acknowledge`). An unknown id is a 404 naming the first "
        "(`ids[i]`, rule `not_found`; `detail` names them all) and nothing is acknowledged; "
        "an id acknowledged "
        "before is listed in `already_acknowledged`.",
        request=AcknowledgeSerializer,
        examples=[
            request_example("one problem", {"ids": ["quarantine:00000000000004194304"]}),
            request_example("every open problem", {"all": True}),
        ],
        responses=responses({200: AcknowledgeResultSerializer}, 400, 401, 403, 404, 415, 503),
    )
    def post(self, request: Request) -> Response:
        data = self.body(AcknowledgeSerializer)
        health: StoreHealth = self.broker.store.health
        outcome = store_health.acknowledge(
            health, request, data.get("ids"), request.user.get_username()
        )
        if outcome.unknown:
            index, pid = outcome.unknown[0]
            named = ", ".join(f"ids[{i}] {p!r}" for i, p in outcome.unknown)
            raise NotFoundError(
                f"ids[{index}]",
                "not_found",
                f"no store problem was reported as {named}; nothing was acknowledged",
            )
        return Response(
            {
                "acknowledged": [acknowledged_dict(p) for p in outcome.acknowledged],
                "already_acknowledged": [
                    acknowledged_dict(p) for p in outcome.already_acknowledged
                ],
                "health": health_dict(health),
            }
        )


def _from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(min(ms, 253402300799999) / 1000, tz=UTC)


class AuditView(BrokerView):
    """Operators and admins read the audit log; viewers may not."""

    read_role = OPERATOR

    @extend_schema(
        summary="The audit log",
        description="Every mutation: who, what (action, target), when, old and new value. "
        "Newest first. `action` matches exactly, or as a prefix when it ends in '.'.",
        parameters=[AuditQuerySerializer],
        responses=responses({200: AuditPageSerializer}, 400, 401, 403),
    )
    def get(self, request: Request) -> Response:
        q = self.query(AuditQuerySerializer)
        entries = AuditEntry.objects.all()
        for name in ("target", "target_type", "username", "front_end"):
            if name in q:
                entries = entries.filter(**{name: q[name]})
        if "action" in q:
            action = q["action"]
            entries = (
                entries.filter(action__startswith=action)
                if action.endswith(".")
                else entries.filter(action=action)
            )
        if "since" in q:
            entries = entries.filter(timestamp__gte=_from_ms(q["since"]))
        if "until" in q:
            entries = entries.filter(timestamp__lt=_from_ms(q["until"]))
        page = paginate(
            request,
            entries,  # type: ignore[arg-type]  # a QuerySet slices and counts like a sequence
            lambda rows: [AuditEntrySerializer(e).data for e in rows],
        )
        return Response(page)
