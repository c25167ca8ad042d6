from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from api.serializers.health import health_counts
from cairn import runtime


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and the README's first check: no login needed.

    ``status`` is the store's health, ``ok`` or ``degraded`` (a problem not yet acknowledged,
    or a condition such as a full disk or a rebuild holding), with ``problems`` and
    ``conditions`` counted; what they are is in ``GET /api/v1/status`` and the console, behind
    a login. The answer is 200 either way: the process is alive and serving what it can, and
    a restart would not mend a degraded store (it would interrupt a rebuild, and problems
    stay until acknowledged), so a liveness probe must not act on it; monitoring alerts on
    ``status`` instead.
    """
    rt = runtime.current()
    body = rt.health()
    store = rt.store
    body.update(health_counts(store.health if store is not None else None))
    return JsonResponse(body)
