from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from cairn import runtime


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and the README's first check: no login needed."""
    return JsonResponse(runtime.current().health())
