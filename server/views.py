from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.views.decorators.http import require_GET
from rest_framework.request import Request
from rest_framework.response import Response

from api.views.base import BrokerView
from cairn import runtime
from shared.serializers.health import health_counts


def public_health() -> dict[str, Any]:
    """What anyone may know: ``status`` (``ok`` or ``degraded``) and how many open
    ``problems`` and ``conditions`` make it so; never what they are, nor where the store is."""
    store = runtime.current().store
    return health_counts(store.health if store is not None else None)


@require_GET
def healthz(request: HttpRequest) -> HttpResponseBase:
    """Liveness for load balancers and the README's first check: no login needed.

    ``status`` is the store's health, ``ok`` or ``degraded`` (a problem not yet acknowledged,
    or a condition such as a full disk or a rebuild holding), with ``problems`` and
    ``conditions`` counted; what they are is in ``GET /api/v1/status`` and the console, behind
    a login. The answer is 200 either way: the process is alive and serving what it can, and
    a restart would not mend a degraded store (it would interrupt a rebuild, and problems
    stay until acknowledged), so a liveness probe must not act on it; monitoring alerts on
    ``status`` instead.

    ``?detail=1`` adds the process's own state (version, store directory, pid, uptime,
    services and their state, the store's offsets) for a logged-in user of any role (session
    or ``Authorization: Token``): 401 without a login, 403 without a role (:class:`HealthDetail`).
    """
    if request.GET.get("detail", "") not in ("", "0"):
        return health_detail(request)
    return JsonResponse(public_health())


class HealthDetail(BrokerView):
    """``/healthz?detail=1``: the public answer and the process's state, any role."""

    def get(self, request: Request) -> Response:
        body = runtime.current().health()
        body.update(public_health())
        return Response(body)


health_detail = HealthDetail.as_view()
