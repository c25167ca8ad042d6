"""``/users/``: the console's user management (admins): the list with each user's role,
state, lockout and last login; create a user; on a user's page set the role, disable or
enable, reset the password, lift a lockout.

Every change goes through :mod:`accounts.service` (the same functions the REST API calls),
which audits it with front end ``console``; input is checked by the REST API's serializers.
A password the console generates is shown once, on the answer to the form that made it
(never stored in clear, never in a redirect's URL or the session).
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache

from accounts import service
from accounts.roles import ADMIN, ROLES
from mqcore.errors import MQError
from shared.serializers.accounts import token_dict
from shared.serializers.admin import UserCreateSerializer, UserUpdateSerializer, user_dict
from webui.access import console_page, console_subject
from webui.views.common import checkbox, mq_errors, validate

#: 20 URL-safe characters (120 random bits): typed once, then changed or kept in a manager.
GENERATED_PASSWORD_BYTES = 15
PASSWORD_MODES = (
    ("generate", "Generate one (shown once)"),
    ("type", "Type one"),
    ("none", "None: API tokens only"),
)
ALIASES = {"is_active": "active"}


def generated_password() -> str:
    return secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)


def _role(post: QueryDict) -> str | None:
    return post.get("role", "").strip() or None


def _password(post: QueryDict, errors: dict[str, str]) -> tuple[str | None, bool]:
    """The password the form asks for (None: none) and whether the console generated it."""
    mode = post.get("password_mode", "generate")
    if mode == "generate":
        return generated_password(), True
    if mode == "type":
        typed = post.get("password", "")
        if not typed:
            errors["password"] = "type a password (at least 8 characters), or generate one"
        return typed, False
    if mode != "none":
        errors["password_mode"] = "choose generate, type or none"
    return None, False


def _shown_once(request: HttpRequest, username: str, password: str, created: bool) -> HttpResponse:
    response = render(
        request,
        "webui/user_password.html",
        {"section": "users", "username": username, "password": password, "created": created},
    )
    response["Cache-Control"] = "no-store"
    return response


@console_page(read_role=ADMIN, write_role=ADMIN)
def user_list(request: HttpRequest) -> HttpResponse:
    users = get_user_model()._default_manager.order_by("username")
    q = request.GET.get("q", "").strip()
    if q:
        users = users.filter(username__icontains=q)
    return render(
        request,
        "webui/users.html",
        {"section": "users", "rows": [user_dict(u) for u in users[:500]], "q": q},
    )


@never_cache
@console_page(read_role=ADMIN, write_role=ADMIN)
def user_create(request: HttpRequest) -> HttpResponse:
    errors: dict[str, str] = {}
    values = {"username": "", "role": "viewer", "password_mode": "generate", "active": True}
    if request.method == "POST":
        post = request.POST
        values = {
            "username": post.get("username", "").strip(),
            "role": post.get("role", ""),
            "password_mode": post.get("password_mode", "generate"),
            "active": checkbox(post, "active"),
        }
        password, generated = _password(post, errors)
        data: dict[str, Any] = {
            "username": values["username"],
            "role": _role(post),
            "is_active": values["active"],
        }
        if password is not None:
            data["password"] = password
        valid, found = validate(UserCreateSerializer, data)
        errors = {**found, **errors}
        if valid is not None and not errors:
            try:
                service.create_user(
                    console_subject(request),
                    valid["username"],
                    valid["role"],
                    password=valid.get("password"),
                    active=valid.get("is_active", True),
                )
            except MQError as exc:
                errors = mq_errors(exc, ALIASES)
            else:
                if generated and password is not None:
                    return _shown_once(request, valid["username"], password, True)
                messages.success(request, f"User {valid['username']} created.")
                return redirect("webui:user", username=valid["username"])
    return render(
        request,
        "webui/user_form.html",
        {
            "section": "users",
            "values": values,
            "errors": errors,
            "roles": ROLES,
            "password_modes": PASSWORD_MODES,
        },  # fmt: skip
        status=400 if errors else 200,
    )


def _change(request: HttpRequest, username: str) -> tuple[HttpResponse | None, dict[str, str]]:
    """One posted change (``action``): the answer, or the form's errors."""
    actor = console_subject(request)
    post = request.POST
    action = post.get("action", "")
    errors: dict[str, str] = {}
    try:
        if action == "role":
            valid, errors = validate(UserUpdateSerializer, {"role": _role(post)})
            if valid is None:
                return None, errors
            service.set_role(actor, username, valid["role"])
            role = valid["role"]
            said = (
                f"{username} now has the {role} role." if role else f"{username} has no role now."
            )
        elif action in ("enable", "disable"):
            service.set_active(actor, username, action == "enable")
            said = f"{username} {action}d."
        elif action == "password":
            password, generated = _password(post, errors)
            if errors or password is None:
                return None, errors or {"password_mode": "choose generate or type"}
            valid, errors = validate(UserUpdateSerializer, {"password": password})
            if valid is None:
                return None, errors
            service.reset_password(actor, username, password)
            if generated:
                return _shown_once(request, username, password, False), {}
            said = f"Password of {username} changed."
        elif action == "unlock":
            cleared = service.lift_lockout(actor, username)
            said = f"Lockout of {username} lifted." if cleared else f"{username} was not locked."
        else:
            return None, {"action": "choose what to change"}
    except MQError as exc:
        return None, mq_errors(exc, ALIASES)
    messages.success(request, said)
    return redirect("webui:user", username=username), {}


@never_cache
@console_page(read_role=ADMIN, write_role=ADMIN)
def user_detail(request: HttpRequest, username: str) -> HttpResponse:
    user = service.get_user(username)  # NotFoundError: the console's 404 page
    errors: dict[str, str] = {}
    if request.method == "POST":
        done, errors = _change(request, username)
        if done is not None:
            return done
        user = service.get_user(username)
    return render(
        request,
        "webui/user.html",
        {
            "section": "users",
            "u": user_dict(user),
            "is_self": username == request.user.get_username(),
            "tokens": [token_dict(t) for t in service.list_tokens(username)],
            "roles": ROLES,
            "password_modes": PASSWORD_MODES[:2],
            "errors": errors,
            "action": request.POST.get("action", "") if errors else "",
        },
        status=400 if errors else 200,
    )
