"""Who may see and do what in the console, and the broker the pages talk to.

Every decision about a topic, a group or the cluster is the one authorizer's
(:func:`authorizer`: ACL entries, deny first, then allow entries, then the role's defaults,
``mqcore.access.authorizer``), asked with Kafka's operations, the same as REST and the Kafka
listener ask it:

==========================================  ==============================================
page or form                                needs
==========================================  ==============================================
topic lists and selects                     ``DESCRIBE`` on each topic shown
a topic's page                              ``DESCRIBE`` on the topic
send                                        ``WRITE`` on the topic
create a topic                              ``CREATE`` on the cluster or on the topic
                                            (a deny entry on either refuses)
edit / delete a topic                       ``ALTER`` / ``DELETE`` on the topic
message search, a message, its body         ``READ`` on the message's topic
group lists, a group's page                 ``DESCRIBE`` on each group (its topics: topic
                                            ``DESCRIBE``)
offset reset                                ``READ`` on the group (Kafka: commits are group
                                            reads) and ``DESCRIBE`` on the topic
delete a group                              ``DELETE`` on the group
dead letters / resend                       ``READ`` on ``%DLQ%<group>`` / ``WRITE`` on the
                                            message's original topic
config documents / import                   ``DESCRIBE`` / ``ALTER`` on the cluster
==========================================  ==============================================

Group create and edit, store-problem acknowledgement and the audit log stay the operator
role's (no Kafka operation matches them; REST does the same). A page gate comes first
(:func:`console_page`): a user with a role, or one an ACL entry allows something (a service
account with no role allowed ``orders.``*), gets in; anyone else is told it has no role.
Pages hide the buttons the user may not use; :class:`Refused` (raised by :func:`require`)
refuses on the server whatever the page showed, with a 403 page naming what and why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.roles import OPERATOR, VIEWER, has_role, role_of
from cairn import runtime
from mqcore.access.authorizer import (
    ROLE_DEFAULTS,
    ROLES,
    Authorizer,
    CachedDecisions,
    Decision,
    Subject,
    allowed_on_any,
)
from mqcore.access.model import WILDCARD, Operation, Permission, Resource, ResourceType
from mqcore.broker import Broker
from mqcore.errors import NotFoundError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: A :func:`console_page` role meaning "any signed-in, active user" (one's own API tokens).
SIGNED_IN = "signed-in"


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


class Refused(Exception):
    """The authorizer refused ``what`` (``write on topic 'orders'``); ``reason`` says why and
    ``needed`` names the lowest role whose defaults would allow it (None: no role does)."""

    def __init__(self, what: str, reason: str, needed: str | None) -> None:
        super().__init__(reason)
        self.what = what
        self.reason = reason
        self.needed = needed


def _decisions(request: HttpRequest) -> CachedDecisions:
    """The request's decisions (a page asks about the same topic several times)."""
    found: CachedDecisions | None = getattr(request, "_cairn_decisions", None)
    if found is None:
        found = CachedDecisions(console_subject(request))
        request._cairn_decisions = found  # type: ignore[attr-defined]
    return found


def decide(request: HttpRequest, operation: Operation, resource: Resource) -> Decision:
    return _decisions(request).check(authorizer(), operation, resource)


def may(request: HttpRequest, operation: Operation, resource: Resource) -> bool:
    """Whether the request's user may do ``operation`` on ``resource``."""
    return decide(request, operation, resource).allowed


def role_needed(operation: Operation, resource_type: ResourceType) -> str | None:
    """The lowest role whose defaults allow ``operation`` on resources of that type."""
    for role in ROLES:
        if operation in ROLE_DEFAULTS[role].get(resource_type, frozenset()):
            return role
    return None


def describe(operation: Operation, resource: Resource) -> str:
    """``write on topic orders``: what a refusal names."""
    return f"{operation.label} on {resource.type.label} {resource.name}"


def require(request: HttpRequest, operation: Operation, *resources: Resource) -> None:
    """Pass if ``operation`` is allowed on one of ``resources`` and no deny entry refuses it
    on any (a topic is created with ``CREATE`` on the cluster or on its name; a deny on
    ``private-``* refuses an operator: :func:`mqcore.access.authorizer.allowed_on_any`, the
    same rule as REST).

    Raises:
        Refused: it names the resource refused (the denied one, or the last).
    """
    assert resources, "require() needs a resource"
    decisions = [decide(request, operation, resource) for resource in resources]
    decision = allowed_on_any(decisions)
    if decision.allowed:
        return
    refused = resources[decisions.index(decision)]
    raise Refused(
        describe(operation, refused), decision.reason, role_needed(operation, refused.type)
    )


def allowed_names(
    request: HttpRequest, operation: Operation, resource_type: ResourceType, names: Iterable[str]
) -> list[str]:
    """Those of ``names`` (of resources of ``resource_type``) the user may do ``operation``
    on, in order."""
    return [n for n in names if may(request, operation, Resource(resource_type, n))]


def readable_topics(request: HttpRequest, topics: Iterable[str]) -> list[str]:
    """Those of ``topics`` the request's user may read (``READ``), in order."""
    return allowed_names(request, Operation.READ, ResourceType.TOPIC, topics)


def describable_topics(request: HttpRequest, topics: Iterable[str]) -> list[str]:
    """Those of ``topics`` the request's user may see listed (``DESCRIBE``), in order."""
    return allowed_names(request, Operation.DESCRIBE, ResourceType.TOPIC, topics)


def describable_groups(request: HttpRequest, groups: Iterable[str]) -> list[str]:
    return allowed_names(request, Operation.DESCRIBE, ResourceType.GROUP, groups)


def _allow_entries(request: HttpRequest, operation: Operation | None = None) -> list[Any]:
    """The allow entries that speak of the request's user (for ``operation``, or any)."""
    subject = _decisions(request).subject
    principals = subject.principals()
    return [
        e
        for e in authorizer().entries
        if e.permission is Permission.ALLOW
        and e.applies_to(principals, subject.host)
        and (operation is None or e.covers(operation))
    ]


def may_create_some(request: HttpRequest, resource_type: ResourceType) -> bool:
    """Whether the user may create some resource of the type: ``CREATE`` on the cluster, or
    an allow entry for ``CREATE`` on such resources (the form then checks the name)."""
    if may(request, Operation.CREATE, Resource.cluster()):
        return True
    return any(e.resource_type is resource_type for e in _allow_entries(request, Operation.CREATE))


def may_enter(request: HttpRequest) -> bool:
    """The page gate: a role, or an ACL entry allowing the user something."""
    return role_of(request.user) is not None or bool(_allow_entries(request))


class BrokerDown(Exception):
    """The broker is not running in this process."""


def get_broker() -> Broker:
    broker = runtime.current().broker
    if broker is None or not broker.started:
        raise BrokerDown()
    return broker


def refuse(
    request: HttpRequest, needed: str | None, status: int = 403, refused: Refused | None = None
) -> HttpResponse:
    """The 403 page: a role needed (``needed``), or what the authorizer refused and why."""
    role = role_of(request.user)
    context = {"needed": needed, "role": role, "section": ""}
    if refused is not None:
        context.update(what=refused.what, reason=refused.reason)
    return render(request, "webui/refused.html", context, status=status)


def console_page(
    read_role: str | None = VIEWER, write_role: str | None = OPERATOR
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Log-in required; ``read_role`` for GET/HEAD, ``write_role`` for other methods (None:
    only the gate of :func:`may_enter`: the view checks its resources with :func:`require`;
    :data:`SIGNED_IN`: any signed-in user).
    A :class:`Refused` answers the 403 page, a stopped broker 503 with a page saying so, an
    unknown topic/group/message 404."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            needed = read_role if request.method in SAFE_METHODS else write_role
            if needed == SIGNED_IN:
                if not request.user.is_active:
                    return refuse(request, VIEWER)
            elif needed is None:
                if not may_enter(request):
                    return refuse(request, VIEWER)
            elif not has_role(request.user, needed):
                return refuse(request, needed)
            try:
                return view(request, *args, **kwargs)
            except Refused as exc:
                return refuse(request, exc.needed, refused=exc)
            except BrokerDown:
                return render(request, "webui/unavailable.html", {"section": ""}, status=503)
            except NotFoundError as exc:
                return render(
                    request, "webui/not_found.html", {"detail": str(exc), "section": ""}, status=404
                )

        return wrapper

    return decorate
