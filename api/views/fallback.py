"""Unknown paths under ``/api/v1/``: a problem+json 404, not Django's HTML page."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse

from api.exceptions import PROBLEM_CONTENT_TYPE


def not_found(request: HttpRequest) -> HttpResponse:
    detail = f"no API endpoint at {request.path}; see /api/v1/docs"
    body = {
        "type": "urn:cairn:problem:not-found",
        "title": "Not found",
        "status": 404,
        "detail": detail,
        "field": "path",
        "rule": "not_found",
        "errors": [{"field": "path", "rule": "not_found", "detail": detail}],
    }
    return HttpResponse(json.dumps(body), status=404, content_type=PROBLEM_CONTENT_TYPE)
