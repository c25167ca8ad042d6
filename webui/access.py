"""Who may see and do what in the console, and the broker the pages talk to.

Roles are the REST API's (:mod:`api.roles`): viewers read, operators change topics, groups,
offsets and messages and read the audit log, admins also import config documents. Pages hide
the buttons a role may not use; :func:`console_page` enforces the same rules on the server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from api.roles import OPERATOR, VIEWER, has_role, role_of
from cairn import runtime
from mqcore.access.authorizer import Authorizer, Subject
from mqcore.access.model import WILDCARD, Operation, Resource
from mqcore.broker import Broker
from mqcore.errors import NotFoundError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def authorizer() -> Authorizer:
    """The ACL decision the console's pages and the live trace make
    (``allowed(Subject(user, role, host, front_end), operation, resource)``).

    The one place they get it from: the runtime's accounts store's current authorizer (the
    ACL entries in the database, then the roles' defaults,
    ``mqcore.access.authorizer.ROLE_DEFAULTS``), the same REST and Kafka decide with. Cheap:
    a cached snapshot, rebuilt when the entries change."""
    return runtime.current().access.authorizer()


def console_subject(request: HttpRequest) -> Subject:
    """Who asks, for :func:`authorizer`: the logged-in user, its role, its address."""
    user = request.user
    return Subject(
        user.get_username() if user.is_authenticated else None,
        role_of(user),
        request.META.get("REMOTE_ADDR") or WILDCARD,
        "console",
    )


def readable_topics(request: HttpRequest, topics: Iterable[str]) -> list[str]:
    """Those of ``topics`` the request's user may read (``READ``), in order."""
    subject, decide = console_subject(request), authorizer()
    return [t for t in topics if decide.allowed(subject, Operation.READ, Resource.topic(t))]


class BrokerDown(Exception):
    """The broker is not running in this process."""


def get_broker() -> Broker:
    broker = runtime.current().broker
    if broker is None or not broker.started:
        raise BrokerDown()
    return broker


def refuse(request: HttpRequest, needed: str, status: int = 403) -> HttpResponse:
    role = role_of(request.user)
    return render(
        request,
        "webui/refused.html",
        {"needed": needed, "role": role, "section": ""},
        status=status,
    )


def console_page(
    read_role: str = VIEWER, write_role: str = OPERATOR
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Log-in required; ``read_role`` for GET/HEAD, ``write_role`` for other methods. A stopped
    broker answers 503 with a page saying so, an unknown topic/group/message 404."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            needed = read_role if request.method in SAFE_METHODS else write_role
            if not has_role(request.user, needed):
                return refuse(request, needed)
            try:
                return view(request, *args, **kwargs)
            except BrokerDown:
                return render(request, "webui/unavailable.html", {"section": ""}, status=503)
            except NotFoundError as exc:
                return render(
                    request, "webui/not_found.html", {"detail": str(exc), "section": ""}, status=404
                )

        return wrapper

    return decorate
