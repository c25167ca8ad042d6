"""Users, roles and tokens (admin), and session login for the console.

Programs authenticate with ``Authorization: Token <token>`` (tokens come from
``python manage.py createtoken`` or ``POST /users/{username}/token``). The console logs in
with ``POST /auth/login``, which starts a Django session; unsafe requests in a session then
need the ``X-CSRFToken`` header (the ``csrftoken`` cookie), as Django requires.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate, get_user_model, login, logout
from django.db import transaction
from django.middleware.csrf import get_token
from drf_spectacular.utils import extend_schema
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from api import audit
from api.roles import ADMIN, role_of, set_role
from api.serializers.admin import (
    LoginSerializer,
    MeSerializer,
    TokenSerializer,
    UserCreateSerializer,
    UserPageSerializer,
    UserSerializer,
    UserUpdateSerializer,
    user_dict,
)
from api.serializers.common import PageQuerySerializer
from api.views.base import BrokerView, paginate
from api.views.schema import path_param, problems, responses
from mqcore.errors import ConflictError, NotFoundError
from mqcore.errors import ValidationError as MQValidationError

USERNAME = path_param("username", "the user's login name")


def _user(username: str) -> Any:
    try:
        return get_user_model().objects.get(username=username)
    except get_user_model().DoesNotExist:
        raise NotFoundError("username", "not_found", f"no user {username!r}") from None


def _settings(user: Any) -> dict[str, Any]:
    return {"role": role_of(user), "is_active": user.is_active}


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
        request=UserCreateSerializer,
        responses=responses({201: UserSerializer}, 400, 401, 403, 409, 415),
    )
    def post(self, request: Request) -> Response:
        data = self.body(UserCreateSerializer)
        model = get_user_model()
        with transaction.atomic():
            if model.objects.filter(username=data["username"]).exists():
                raise ConflictError(f"user {data['username']!r} exists")
            user = model.objects.create_user(data["username"], password=data.get("password"))
            if "is_active" in data:
                user.is_active = data["is_active"]
                user.save(update_fields=["is_active"])
            set_role(user, data["role"])
            audit.record(request, "user.create", "user", user.username, new=_settings(user))
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
        return Response(user_dict(_user(username)))

    @extend_schema(
        summary="Change a user's role, password or active flag (admin)",
        parameters=[USERNAME],
        request=UserUpdateSerializer,
        responses=responses({200: UserSerializer}, 400, 401, 403, 404, 415),
    )
    def patch(self, request: Request, username: str) -> Response:
        data = self.body(UserUpdateSerializer)
        with transaction.atomic():
            user = _user(username)
            old = _settings(user)
            if "role" in data:
                set_role(user, data["role"])
            if "is_active" in data:
                user.is_active = data["is_active"]
            if "password" in data:
                user.set_password(data["password"])
            user.save()
            new = _settings(user)
            if "password" in data:
                new["password"] = "changed"  # never the password itself
            audit.record(request, "user.update", "user", username, old=old, new=new)
        return Response(user_dict(user))

    @extend_schema(
        summary="Delete a user (admin)",
        parameters=[USERNAME],
        request=None,
        responses={204: None, **problems(400, 401, 403, 404)},
    )
    def delete(self, request: Request, username: str) -> Response:
        with transaction.atomic():
            user = _user(username)
            if user.pk == request.user.pk:
                raise MQValidationError("username", "self", "you cannot delete your own account")
            old = _settings(user)
            user.delete()
            audit.record(request, "user.delete", "user", username, old=old)
        return Response(status=204)


class UserTokenView(BrokerView):
    read_role = ADMIN
    write_role = ADMIN

    @extend_schema(
        summary="Issue a new API token for a user (admin)",
        description="Replaces the user's previous token, which stops working.",
        parameters=[USERNAME],
        request=None,
        responses=responses({201: TokenSerializer}, 401, 403, 404),
    )
    def post(self, request: Request, username: str) -> Response:
        with transaction.atomic():
            user = _user(username)
            Token.objects.filter(user=user).delete()
            token = Token.objects.create(user=user)
            audit.record(request, "user.token", "user", username, new={"token": "issued"})
        return Response({"username": username, "token": token.key}, status=201)


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
    authentication_classes = [TokenAuthentication, _CsrfExemptSession]

    @extend_schema(
        summary="Log in (starts a session for the console)",
        request=LoginSerializer,
        responses=responses({200: MeSerializer}, 400, 401, 415),
        auth=[],
    )
    def post(self, request: Request) -> Response:
        data = self.body(LoginSerializer)
        user = authenticate(request._request, username=data["username"], password=data["password"])
        if user is None:
            raise AuthenticationFailed("wrong username or password")
        login(request._request, user)
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
