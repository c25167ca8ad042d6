"""Broker status and the audit log."""

from __future__ import annotations

from datetime import UTC, datetime

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

import mqcore
from api.models import AuditEntry
from api.roles import OPERATOR
from api.serializers import tiered
from api.serializers.admin import (
    AuditEntrySerializer,
    AuditPageSerializer,
    AuditQuerySerializer,
    StatusSerializer,
    status_dict,
)
from api.views.base import BrokerView, paginate
from api.views.schema import responses
from cairn import runtime


class StatusView(BrokerView):
    @extend_schema(
        summary="Broker status",
        description="Store size, disk usage, messages per second over the last minute, "
        "each in-process service's state, and tiered storage totals (`tier`).",
        responses=responses({200: StatusSerializer}, 401, 403, 503),
    )
    def get(self, request: Request) -> Response:
        rt = runtime.current()
        status = self.broker.status(services=rt.service_states())
        body = status_dict(status, mqcore.__version__, rt.services_mode)
        body["tier"] = tiered.summary(rt)
        return Response(body)


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
        for name in ("target", "target_type", "username"):
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
