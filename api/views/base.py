"""What every API view shares: the role policy, the broker, input validation, paging."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseBase
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.views import APIView

from accounts.roles import OPERATOR, VIEWER
from api.exceptions import BrokerUnavailable
from api.negotiation import QuickContentNegotiation
from api.permissions import RolePermission
from cairn import runtime
from mqcore.broker import Broker
from shared.serializers.common import PageQuerySerializer


class BrokerView(APIView):
    """Base of the API views. Policies are class attributes: ``read_role`` for GET/HEAD/OPTIONS,
    ``write_role`` for the rest, ``method_roles`` to single out one method."""

    permission_classes = [RolePermission]
    content_negotiation_class = QuickContentNegotiation
    read_role = VIEWER
    write_role = OPERATOR
    method_roles: dict[str, str] = {}
    #: mqcore error fields renamed to this view's request fields (e.g. topic_name -> name).
    mq_field_aliases: dict[str, str] = {}

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            response: HttpResponseBase = super().dispatch(request, *args, **kwargs)
            return response
        finally:
            self._break_cycles()

    def _break_cycles(self) -> None:
        """Unlink the view from the request once the response is made, so that they and the
        parsed body are freed as soon as the request ends rather than by the cyclic garbage
        collector. Django's ``View.setup`` sets ``self.head = self.get`` (the view refers to
        itself), DRF's Request holds the view and itself in ``parser_context``, and the view
        holds the response (whose ``renderer_context`` holds the view). Left as cycles, a
        1000-message send's body (~2000 dicts and lists) outlived its request until a
        collection, promoted through the generations meanwhile and walked again by each
        collection (with ``server.asgi``'s threshold as well, the collector's share of such a
        send fell from ~2 ms to ~0.1 ms). Nothing reads these links after ``dispatch``: the
        handler renders and sends the response it returned."""
        state = self.__dict__
        state.pop("head", None)
        state.pop("response", None)
        request = state.get("request")
        if isinstance(request, Request) and isinstance(request.parser_context, dict):
            request.parser_context.pop("view", None)
            request.parser_context.pop("request", None)

    @property
    def broker(self) -> Broker:
        """The running broker, or 503 if this process has none."""
        broker = runtime.current().broker
        if broker is None:
            raise BrokerUnavailable()
        return broker

    def now_ms(self) -> int:
        return runtime.current().clock.now_ms()

    def body(self, serializer: type[serializers.Serializer], **kwargs: Any) -> dict[str, Any]:
        """The validated request body (400 with every broken rule otherwise)."""
        s = serializer(data=self.request.data, **kwargs)
        s.is_valid(raise_exception=True)
        return dict(s.validated_data)

    def query(self, serializer: type[serializers.Serializer]) -> dict[str, Any]:
        """The validated query parameters."""
        return validate_query(serializer, self.request)


def validate_query(serializer: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    """Query parameters through ``serializer``, strictly: a parameter given empty
    (``?limit=``) is validated like any value (DRF's form handling would drop it)."""
    params = request.query_params
    fields = serializer().fields
    data: dict[str, Any] = {}
    for name in params:
        many = isinstance(fields.get(name), serializers.ListField | serializers.MultipleChoiceField)
        data[name] = params.getlist(name) if many else params[name]
    s = serializer(data=data)
    s.is_valid(raise_exception=True)
    return dict(s.validated_data)


def paginate[T](
    request: Request, items: Sequence[T], render: Callable[[Sequence[T]], list[Any]]
) -> dict[str, Any]:
    """``{"count", "next", "previous", "results"}`` for ``?limit=&offset=`` (limit 1..1000,
    default 100). ``render`` turns the page's items into JSON (only the page is rendered)."""
    page = validate_query(PageQuerySerializer, request)
    limit, offset = page["limit"], page["offset"]
    count = items.count() if isinstance(items, QuerySet) else len(items)

    def link(at: int) -> str:
        params = request.query_params.copy()
        params["limit"] = str(limit)
        params["offset"] = str(at)
        return request.build_absolute_uri(request.path) + "?" + params.urlencode()

    return {
        "count": count,
        "next": link(offset + limit) if offset + limit < count else None,
        "previous": link(max(0, offset - limit)) if offset > 0 else None,
        "results": render(items[offset : offset + limit]),
    }
