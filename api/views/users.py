"""Users and roles (admin), and session login for the console.

Programs authenticate with ``Authorization: Token <token>`` (tokens come from
``python manage.py createtoken`` or ``POST /tokens``: :mod:`api.views.accounts`). The console
logs in with ``POST /auth/login``, which starts a Django session; unsafe requests in a session
then need the ``X-CSRFToken`` header (the ``csrftoken`` cookie), as Django requires. Logins
are throttled per user and per address and lock a user out after repeated failures
(:mod:`accounts.logins`): 429 with ``Retry-After``. Every change goes through
:mod:`accounts.service`, which audits it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model, login, logout
from django.db import transaction
from django.middleware.csrf import get_token
from drf_spectacular.utils import extend_schema
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import logins, service
from accounts.roles import ADMIN, role_of, subject_of
from api.authentication import QuickTokenAuthentication
from api.views.base import BrokerView, paginate
from api.views.schema import path_param, problems, responses
from shared.serializers.admin import (
    LoginSerializer,
    MeSerializer,
    UserCreateSerializer,
    UserPageSerializer,
    UserSerializer,
    UserUpdateSerializer,
    user_dict,
)
from shared.serializers.common import PageQuerySerializer

USERNAME = path_param("username", "the user's login name")


class UserListView(BrokerView):
    read_role = ADMIN
    write_role = ADMIN

    @extend_schema(
        operation_id="users_list",
        summary="List users (admin)",
        parameters=[PageQuerySerializer],
        responses=responses({200: UserPageSerializer}, 400, 401, 403),
    )
    def get(self, request: Request) -> Response:
        users = get_user_model().objects.order_by("username")
        return Response(paginate(request, users, lambda page: [user_dict(u) for u in page]))  # type: ignore[arg-type]

    @extend_schema(
        summary="Create a user (admin)",
        description="`role` null: a user with no role, which only ACL entries allow things.",
        request=UserCreateSerializer,
        responses=responses({201: UserSerializer}, 400, 401, 403, 409, 415),
    )
    def post(self, request: Request) -> Response:
        data = self.body(UserCreateSerializer)
        user = service.create_user(
            subject_of(request),
            data["username"],
            data["role"],
            password=data.get("password"),
            active=data.get("is_active", True),
        )
        return Response(user_dict(user), status=201)


class UserDetailView(BrokerView):
    read_role = ADMIN
    write_role = ADMIN

    @extend_schema(
        summary="Get a user (admin)",
        parameters=[USERNAME],
        responses=responses({200: UserSerializer}, 401, 403, 404),
    )
    def get(self, request: Request, username: str) -> Response:
        return Response(user_dict(service.get_user(username)))

    @extend_schema(
        summary="Change a user's role, password or active flag (admin)",
        description="`role` null takes the role away; `is_active` false disables the user "
        "(no login, no token, no Kafka connection). Each change is audited on its own "
        "(`user.role`, `user.password`, `user.disable`/`user.enable`).",
        parameters=[USERNAME],
        request=UserUpdateSerializer,
        responses=responses({200: UserSerializer}, 400, 401, 403, 404, 415),
    )
    def patch(self, request: Request, username: str) -> Response:
        data = self.body(UserUpdateSerializer)
        actor = subject_of(request)
        with transaction.atomic():
            user = service.get_user(username)
            if "role" in data:
                user = service.set_role(actor, username, data["role"])
            if "is_active" in data:
                user = service.set_active(actor, username, data["is_active"])
            if "password" in data:
                user = service.reset_password(actor, username, data["password"])
        return Response(user_dict(user))

    @extend_schema(
        summary="Delete a user (admin)",
        parameters=[USERNAME],
        request=None,
        responses={204: None, **problems(400, 401, 403, 404)},
    )
    def delete(self, request: Request, username: str) -> Response:
        service.delete_user(subject_of(request), username)
        return Response(status=204)


class _CsrfExemptSession(SessionAuthentication):
    """Login and logout: no CSRF check (there is no session to protect yet, or any more)."""

    def enforce_csrf(self, request: Any) -> None:
        return None


class MeView(BrokerView):
    permission_classes = [AllowAny]

    @extend_schema(summary="Who am I", responses={200: MeSerializer})
    def get(self, request: Request) -> Response:
        get_token(request)  # sets the csrftoken cookie for the console's unsafe requests
        user = request.user
        return Response(
            {
                "authenticated": bool(user.is_authenticated),
                "username": user.get_username() if user.is_authenticated else None,
                "role": role_of(user),
            }
        )


class LoginView(BrokerView):
    permission_classes = [AllowAny]
    authentication_classes = [QuickTokenAuthentication, _CsrfExemptSession]

    @extend_schema(
        summary="Log in (starts a session for the console)",
        description="Failed logins are throttled per user and per address, and lock a user "
        'out after repeated failures (README "Security"): 429 with Retry-After, whatever '
        "the password.",
        request=LoginSerializer,
        responses=responses({200: MeSerializer}, 400, 401, 415, 429),
        auth=[],
    )
    def post(self, request: Request) -> Response:
        data = self.body(LoginSerializer)
        address = request.META.get("REMOTE_ADDR") or ""
        user, outcome = logins.authenticate(data["username"], data["password"], address, "rest")
        if isinstance(outcome, logins.Throttled):
            raise Throttled(wait=outcome.retry_after_s, detail=outcome.reason)
        if user is None:
            raise AuthenticationFailed("wrong username or password")
        login(request._request, user, backend="django.contrib.auth.backends.ModelBackend")
        get_token(request._request)
        return Response(
            {"authenticated": True, "username": user.get_username(), "role": role_of(user)}
        )


class LogoutView(BrokerView):
    permission_classes = [AllowAny]
    authentication_classes = [_CsrfExemptSession]

    @extend_schema(summary="Log out", request=None, responses={204: None})
    def post(self, request: Request) -> Response:
        logout(request._request)
        return Response(status=204)
