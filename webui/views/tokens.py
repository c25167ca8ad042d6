"""``/tokens/``: API tokens. Every signed-in user lists, issues and revokes its own (a service
account with no role too); an admin also anyone's (``?user=<name>``, the form's user field).

A token is shown once, on the answer to the form that issued it, with a copy button: it is
stored hashed (:mod:`accounts.tokens`). Every change goes through :mod:`accounts.service`,
which audits it with front end ``console``. Someone else's token is, to a non-admin, as if it
did not exist (404), as over REST.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache

from accounts import service
from accounts.roles import ADMIN, has_role
from mqcore.errors import MQError, NotFoundError
from shared.serializers.accounts import TokenCreateSerializer, token_dict
from webui.access import SIGNED_IN, Refused, console_page, console_subject
from webui.search import parse_time
from webui.views.common import mq_errors, validate

#: An expiry later than the year 9000 is a typing mistake (the REST API refuses it too).
LATEST_EXPIRY_MS = int(datetime(9000, 1, 1, tzinfo=UTC).timestamp() * 1000)
#: Ids beyond this are no token (and more than the database's integers hold).
MAX_ID = 2**63 - 1


def _whose(request: HttpRequest, username: str) -> str:
    """The user whose tokens are meant: oneself, or (admins) anyone.

    Raises:
        Refused: a non-admin naming another user.
    """
    own = request.user.get_username()
    if not username or username == own:
        return own
    if not has_role(request.user, ADMIN):
        raise Refused(
            f"manage the API tokens of {username}",
            "only admins manage other users' tokens",
            ADMIN,
        )
    return username


def _expiry(request: HttpRequest) -> tuple[datetime | None, dict[str, str]]:
    """The ``expires`` field (``datetime-local``, its ``_ms`` twin set by console.js)."""
    try:
        ms = parse_time(request.POST, "expires", None)
    except (ValueError, OverflowError):
        return None, {"expires": "not a valid time"}
    if ms is None:
        return None, {}
    if ms >= LATEST_EXPIRY_MS:
        return None, {"expires": "expires is too far in the future"}
    return datetime.fromtimestamp(ms / 1000, tz=UTC), {}


def _page(
    request: HttpRequest,
    username: str,
    *,
    errors: dict[str, str] | None = None,
    issued: dict[str, Any] | None = None,
    values: dict[str, str] | None = None,
) -> HttpResponse:
    admin = has_role(request.user, ADMIN)
    names = (
        list(get_user_model()._default_manager.order_by("username").values_list("username", flat=True)[:500])
        if admin
        else []
    )  # fmt: skip
    response = render(
        request,
        "webui/tokens.html",
        {
            "section": "tokens",
            "username": username,
            "own": username == request.user.get_username(),
            "admin": admin,
            "usernames": names,
            "tokens": [token_dict(t) for t in reversed(service.list_tokens(username))],
            "errors": errors or {},
            "issued": issued,
            "values": values or {"name": "", "expires": ""},
        },
        status=400 if errors else 200,
    )
    if issued is not None:
        response["Cache-Control"] = "no-store"
    return response


@never_cache
@console_page(read_role=SIGNED_IN, write_role=SIGNED_IN)
def token_list(request: HttpRequest) -> HttpResponse:
    """GET: the tokens, newest first, and the issue form. POST: issue one."""
    source = request.POST if request.method == "POST" else request.GET
    username = _whose(request, source.get("user", "").strip())
    service.get_user(username)  # NotFoundError: the 404 page
    if request.method != "POST":
        return _page(request, username)
    values = {"name": request.POST.get("name", ""), "expires": request.POST.get("expires", "")}
    expires, errors = _expiry(request)
    valid, found = validate(TokenCreateSerializer, {"name": values["name"]})
    errors = {**found, **errors}
    if valid is None or errors:
        return _page(request, username, errors=errors, values=values)
    try:
        issued = service.issue_token(console_subject(request), username, valid["name"], expires)
    except MQError as exc:
        return _page(request, username, errors=mq_errors(exc), values=values)
    return _page(request, username, issued={**token_dict(issued.token), "text": issued.text})


@console_page(read_role=SIGNED_IN, write_role=SIGNED_IN)
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    """POST: revoke the token now (the list's button asks to confirm first)."""
    if token_id > MAX_ID:
        raise NotFoundError("token_id", "not_found", f"no token {token_id}")
    token = service.get_token(token_id)
    owner = token.user.get_username()
    if owner != request.user.get_username() and not has_role(request.user, ADMIN):
        raise NotFoundError("token_id", "not_found", f"no token {token_id}")
    back = reverse("webui:tokens")
    if owner != request.user.get_username():
        back += "?" + urlencode({"user": owner})
    if request.method != "POST":
        return redirect(back)
    service.revoke_token(console_subject(request), token.pk)
    messages.success(request, f"Token {token.name!r} of {owner} revoked: it stops working now.")
    return redirect(back)
