"""REST's permission checks: :class:`RolePermission` (the DRF permission every view uses),
:func:`require` and :func:`require_some` (a view's own checks on resources named in the body).

Views state their policy as class attributes (``read_role``, ``write_role``) and use
:class:`RolePermission` (the roles are :mod:`accounts.roles`'). A view about one topic or
group also names, per method, the operation on it
(``acl = {"POST": (ResourceType.TOPIC, "topic", Operation.WRITE)}``: type, URL argument,
operation): that method is then decided by the one authorizer every front end uses
(``mqcore.access.authorizer``: ACL entries, deny first, then allow entries, then the role's
defaults), so a deny entry refuses an operator a topic and an allow entry lets a user with no
role send to it. A method whose resources come from the body or a lookup (a topic to create,
a message's original topic) is listed in ``acl_in_view``: the permission then only asks for a
signed-in user and the view decides with :func:`require_some` (a cheap gate, before the body
is read: whether the user may do the operation on some resource of the type at all) and
:func:`require` (the resources themselves).
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from accounts.acls import authorizer
from accounts.roles import OPERATOR, RANK, VIEWER, role_of, subject_of
from mqcore.access.authorizer import ROLE_DEFAULTS, allowed_on_any
from mqcore.access.model import Operation, Permission, Resource, ResourceType

#: A view's per-method resource check: (resource type, URL argument naming it, operation).
AclSpec = tuple[ResourceType, str, Operation]


class RolePermission(BasePermission):
    """Safe methods need ``view.read_role``; every other method ``view.write_role``.

    A view may also name a role per method in ``view.method_roles`` (e.g. ``{"PUT": "admin"}``).
    """

    message = "your role does not allow this"

    def has_permission(self, request: Request, view: Any) -> bool:
        spec: AclSpec | None = getattr(view, "acl", {}).get(request.method or "GET")
        if spec is not None:
            return self._resource_allowed(request, view, spec)
        if (request.method or "GET") in getattr(view, "acl_in_view", ()):
            return bool(request.user.is_authenticated)  # the view decides (require_some)
        required = required_role(request.method or "GET", view)
        role = role_of(request.user)
        if role is None or RANK[role] < RANK[required]:
            self.message = f"{request.method} here needs the {required} role" + (
                f"; you are {role}" if role else "; you have no role"
            )
            return False
        return True

    def _resource_allowed(self, request: Request, view: Any, spec: AclSpec) -> bool:
        if not request.user.is_authenticated:
            return False  # 401, as for any other view
        rtype, argument, operation = spec
        decision = authorizer().decide(
            subject_of(request), operation, Resource(rtype, str(view.kwargs[argument]))
        )
        if not decision.allowed:
            self.message = decision.reason
        return decision.allowed


def require(request: Any, operation: Operation, *resources: Resource) -> None:
    """Refuse (403, the decision's reason) unless the authorizer allows ``operation`` on
    ``resources`` (a view's check on a resource named in the body or found by a lookup).
    Several resources: allowed on any of them, and a deny entry on any refuses
    (:func:`mqcore.access.authorizer.allowed_on_any`; a topic is created with ``CREATE`` on
    the cluster or on its name, as in the console).

    Raises:
        PermissionDenied: not allowed.
    """
    decide, subject = authorizer().decide, subject_of(request)
    decision = allowed_on_any(decide(subject, operation, r) for r in resources)
    if not decision.allowed:
        raise PermissionDenied(decision.reason)


def require_some(
    request: Any, operation: Operation, resource_type: ResourceType, *, cluster: bool = False
) -> None:
    """Refuse (403) a user who may not do ``operation`` on any resource of the type: its
    role's defaults do not allow it and no allow entry for it speaks of the user (with
    ``cluster``, also not allowed on the cluster: topic creation). The gate before the body
    is read or a resource looked up, so that a viewer is refused first, as by its role
    (the console's gate for its create form is the same); :func:`require` then decides on
    the resource itself.

    Raises:
        PermissionDenied: no chance of being allowed.
    """
    current, subject = authorizer(), subject_of(request)
    if cluster:
        decision = current.decide(subject, operation, Resource.cluster())
        if decision.allowed:
            return
    defaults = ROLE_DEFAULTS.get(subject.role, {}) if subject.role else {}
    if operation in defaults.get(resource_type, frozenset()):
        return
    principals = subject.principals()
    if any(
        e.permission is Permission.ALLOW
        and e.resource_type is resource_type
        and e.applies_to(principals, subject.host)
        and e.covers(operation)
        for e in current.entries
    ):
        return
    role = f"role {subject.role}" if subject.role else "no role"
    raise PermissionDenied(
        f"{operation.label} on any {resource_type.label}"
        + (" or on the cluster" if cluster else "")
        + f" is not allowed to {subject.principal} ({role})"
    )


def required_role(method: str, view: Any) -> str:
    method_roles: dict[str, str] = getattr(view, "method_roles", {})
    if method in method_roles:
        return method_roles[method]
    if method in SAFE_METHODS:
        return str(getattr(view, "read_role", VIEWER))
    return str(getattr(view, "write_role", OPERATOR))
