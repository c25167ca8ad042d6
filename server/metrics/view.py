"""``GET /metrics``: the registry in Prometheus' text format (or OpenMetrics when asked).

Who may scrape:

* a client whose address is in ``CAIRN_METRICS_ALLOW`` (``settings.CAIRN_METRICS_ALLOW``:
  addresses and networks; empty by default), without credentials; or
* a user of any role, with the REST API's authentication (``Authorization: Token <token>``,
  the same tokens as the API; a console session works too). Prometheus sends a token with
  ``authorization: {type: Token, credentials_file: ...}`` in its scrape config.

Anyone else gets the API's problem+json: 401 without (valid) credentials, 403 for a user
with no role. A token that is invalid is a 401 even from an allowed address: a client that
sends credentials means them.

The metrics name topics and groups, as the status endpoint and the console do for any
role; ACL entries that hide a topic from a user do not filter them (metrics are an
operator's view of the broker, and an allowed address has no user to filter for).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from django.conf import settings
from django.http import HttpResponse
from prometheus_client.exposition import choose_encoder
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from accounts.roles import VIEWER
from api.permissions import RolePermission
from server.metrics.broker import BrokerCollector
from server.metrics.registry import REGISTRY

REGISTRY.register(BrokerCollector())


def address_allowed(address: str | None) -> bool:
    """Whether ``address`` (the client's, ``REMOTE_ADDR``) is in ``CAIRN_METRICS_ALLOW``."""
    networks = settings.CAIRN_METRICS_ALLOW
    if not networks or not address:
        return False
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:10.0.0.5 from a dual-stack socket is 10.0.0.5
    return any(ip in network for network in networks)


class AllowedAddressOrRole(BasePermission):
    """An allowed address, or else any role (:class:`api.roles.RolePermission`)."""

    message = RolePermission.message

    def has_permission(self, request: Request, view: Any) -> bool:
        if address_allowed(request.META.get("REMOTE_ADDR")):
            return True
        checker = RolePermission()
        allowed = checker.has_permission(request, view)
        self.message = checker.message
        return allowed


class AnyAccept(BaseContentNegotiation):
    """The metrics body picks its own format (``choose_encoder``); DRF's renderer only
    writes error bodies, so whatever ``Accept`` says never turns a scrape into a 406."""

    def select_parser(self, request: Request, parsers: list[Any]) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(
        self, request: Request, renderers: list[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        return renderers[0], str(renderers[0].media_type)


class MetricsView(APIView):
    permission_classes = [AllowedAddressOrRole]
    content_negotiation_class = AnyAccept
    read_role = VIEWER

    def get(self, request: Request) -> HttpResponse:
        encode, content_type = choose_encoder(request.META.get("HTTP_ACCEPT", ""))
        return HttpResponse(encode(REGISTRY), content_type=content_type)


metrics = MetricsView.as_view()
