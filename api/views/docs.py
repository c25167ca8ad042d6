"""The OpenAPI document and a self-contained docs page (no CDN: it works offline)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.views import SpectacularJSONAPIView
from rest_framework.permissions import AllowAny

_METHODS = ("get", "post", "put", "patch", "delete")


class OpenAPIView(SpectacularJSONAPIView):
    """``/api/v1/openapi.json``: public, so tools can read it before they have a token."""

    permission_classes = [AllowAny]
    authentication_classes: list[Any] = []


def _schema_name(ref_holder: Any) -> str:
    if isinstance(ref_holder, dict):
        ref = ref_holder.get("$ref") or ref_holder.get("items", {}).get("$ref", "")
        return str(ref).rsplit("/", 1)[-1]
    return ""


def docs(request: HttpRequest) -> HttpResponse:
    """Every operation: method, path, summary, description, parameters, bodies, statuses."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = []
    for path, item in schema["paths"].items():
        for method in _METHODS:
            op = item.get(method)
            if op is None:
                continue
            body = op.get("requestBody", {}).get("content", {})
            operations.append(
                {
                    "method": method.upper(),
                    "path": path,
                    "summary": op.get("summary", ""),
                    "description": op.get("description", ""),
                    "parameters": op.get("parameters", []),
                    "request": {ct: _schema_name(c.get("schema")) for ct, c in body.items()},
                    "responses": {
                        code: r.get("description", "")
                        for code, r in op.get("responses", {}).items()
                    },
                    "anchor": f"{method}-{path}".replace("/", "-")
                    .replace("{", "")
                    .replace("}", ""),
                }
            )
    components = schema.get("components", {}).get("schemas", {})
    return render(
        request,
        "api/docs.html",
        {
            "info": schema["info"],
            "operations": operations,
            "components": sorted(components.items()),
        },
    )
