"""API tokens (``/tokens``: a user manages its own, an admin anyone's), ACL entries
(``/acls``, admin) and lifting lockouts (``/users/{username}/unlock``, admin).

Every change goes through :mod:`accounts.service`, which audits it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import service
from accounts.roles import ADMIN, has_role, subject_of
from api.views.base import BrokerView, paginate
from api.views.schema import path_param, problems, responses
from mqcore.access.model import AclFilter
from mqcore.errors import NotFoundError
from mqcore.errors import ValidationError as MQValidationError
from shared.serializers.accounts import (
    AclCreatedSerializer,
    AclCreateSerializer,
    AclDeletedSerializer,
    AclFilterSerializer,
    AclPageSerializer,
    IssuedTokenSerializer,
    TokenCreateSerializer,
    TokenPageSerializer,
    TokenQuerySerializer,
    TokenSerializer,
    UnlockedSerializer,
    UnlockSerializer,
    acl_dict,
    token_dict,
)

USERNAME = path_param("username", "the user's login name")
TOKEN_ID = path_param("token_id", "the token's id", r"^[0-9]{1,18}$", "1")
_FILTERS = ("id", "principal", "resource_type", "resource_name", "operation", "permission", "host")


def _whose(request: Request, username: str | None) -> str:
    """The user whose tokens are meant: oneself, or (admins) anyone."""
    own = request.user.get_username()
    if username is None or username == own:
        return own
    if not has_role(request.user, ADMIN):
        raise PermissionDenied("only admins manage other users' tokens")
    return username


class TokenListView(BrokerView):
    # Every logged-in user (one with no role too) manages its own tokens.
    permission_classes = [IsAuthenticated]

    @extend_schema(
        operation_id="tokens_list",
        summary="List API tokens (yours; an admin's: anyone's)",
        parameters=[TokenQuerySerializer],
        responses=responses({200: TokenPageSerializer}, 400, 401, 403, 404),
    )
    def get(self, request: Request) -> Response:
        q = self.query(TokenQuerySerializer)
        tokens = service.list_tokens(_whose(request, q.get("username")))
        return Response(paginate(request, tokens, lambda page: [token_dict(t) for t in page]))

    @extend_schema(
        summary="Issue an API token (for yourself; an admin: for anyone)",
        description="The token is in the answer only: it is kept hashed. The user's other "
        "tokens keep working.",
        request=TokenCreateSerializer,
        responses=responses({201: IssuedTokenSerializer}, 400, 401, 403, 404, 415),
    )
    def post(self, request: Request) -> Response:
        data = self.body(TokenCreateSerializer)
        username = _whose(request, data.get("username"))
        expires = data.get("expires")
        when = datetime.fromtimestamp(expires / 1000, tz=UTC) if expires is not None else None
        if when is not None and when.year > 9000:
            raise MQValidationError("expires", "range", "expires is too far in the future")
        issued = service.issue_token(subject_of(request), username, data["name"], when)
        return Response({**token_dict(issued.token), "token": issued.text}, status=201)


class TokenDetailView(BrokerView):
    permission_classes = [IsAuthenticated]

    def _token(self, request: Request, token_id: str) -> Any:
        if not token_id.isdigit() or len(token_id) > 18:
            raise NotFoundError("token_id", "not_found", f"no token {token_id[:40]!r}")
        token = service.get_token(int(token_id))
        if token.user_id != request.user.pk and not has_role(request.user, ADMIN):
            # Not yours: as if it did not exist (ids are not secret, but say nothing more).
            raise NotFoundError("token_id", "not_found", f"no token {token_id}")
        return token

    @extend_schema(
        summary="Get an API token (without its text)",
        parameters=[TOKEN_ID],
        responses=responses({200: TokenSerializer}, 401, 404),
    )
    def get(self, request: Request, token_id: str) -> Response:
        return Response(token_dict(self._token(request, token_id)))

    @extend_schema(
        summary="Revoke an API token",
        description="It stops working at once (REST, WebSocket, Kafka SASL).",
        parameters=[TOKEN_ID],
        request=None,
        responses={200: TokenSerializer, **problems(401, 404)},
    )
    def delete(self, request: Request, token_id: str) -> Response:
        token = self._token(request, token_id)
        return Response(token_dict(service.revoke_token(subject_of(request), token.pk)))


class AclListView(BrokerView):
    read_role = ADMIN
    write_role = ADMIN

    @extend_schema(
        operation_id="acls_list",
        summary="List ACL entries (admin)",
        parameters=[AclFilterSerializer],
        responses=responses({200: AclPageSerializer}, 400, 401, 403),
    )
    def get(self, request: Request) -> Response:
        q = self.query(AclFilterSerializer)
        found = _selected(q)
        return Response(paginate(request, found, lambda page: [acl_dict(*r) for r in page]))

    @extend_schema(
        summary="Add ACL entries (admin)",
        description="Each entry is stored once (an equal entry is kept). Takes effect at once "
        "on every front end (REST, console, live trace, Kafka).",
        request=AclCreateSerializer,
        responses=responses({201: AclCreatedSerializer}, 400, 401, 403, 415),
    )
    def post(self, request: Request) -> Response:
        data = self.body(AclCreateSerializer)
        entries = [item["entry"] for item in data["entries"]]
        created = service.add_acls(subject_of(request), entries)
        ids = {entry: pk for pk, entry in service.list_acls(AclFilter())}
        return Response(
            {
                "created": sum(created),
                "entries": [acl_dict(ids[entry], entry) for entry in entries],
            },
            status=201,
        )

    @extend_schema(
        summary="Delete ACL entries (admin)",
        description="Deletes every entry the filter matches (at least one parameter).",
        parameters=[AclFilterSerializer],
        request=None,
        responses=responses({200: AclDeletedSerializer}, 400, 401, 403),
    )
    def delete(self, request: Request) -> Response:
        q = self.query(AclFilterSerializer)
        if not any(name in q for name in _FILTERS):
            raise MQValidationError(
                "id", "required", "give at least one filter (id, principal, resource_type, ...)"
            )
        gone = service.delete_acls(subject_of(request), q["filter"], q.get("id"))
        return Response({"deleted": len(gone), "entries": [acl_dict(*r) for r in gone]})


def _selected(q: dict[str, Any]) -> list[Any]:
    found = service.list_acls(q["filter"])
    if "id" in q:
        wanted = set(q["id"])
        found = [r for r in found if r[0] in wanted]
    return found


class UserUnlockView(BrokerView):
    read_role = ADMIN
    write_role = ADMIN

    @extend_schema(
        summary="Lift a user's lockout (admin)",
        description="Clears the user's failed logins and lockout, and with `address` that "
        "address's failed logins too.",
        parameters=[USERNAME],
        request=UnlockSerializer,
        responses=responses({200: UnlockedSerializer}, 400, 401, 403, 404, 415),
    )
    def post(self, request: Request, username: str) -> Response:
        data = self.body(UnlockSerializer) if request.data else {}
        cleared = service.lift_lockout(subject_of(request), username, data.get("address"))
        return Response({"username": username, "cleared": cleared})
