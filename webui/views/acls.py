"""``/acls/``: ACL entries (admins): the list with filters, an entry added from a form, one
deleted after a confirmation page.

An entry: ``permission`` (allow or deny) of ``principal`` (``User:<name>``, ``Role:<role>``
or ``User:*``) from ``host`` to do ``operation`` on resources of ``resource_type`` named
``resource_name`` literally or by prefix (:mod:`mqcore.access.model`). Changes take effect
at once on every front end; they go through :mod:`accounts.service`, which audits them with
front end ``console``. Input is checked by the REST API's serializers (same rules, same
messages).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from accounts import service
from accounts.roles import ADMIN
from mqcore.access.model import AclEntry, AclFilter
from mqcore.errors import MQError, NotFoundError
from shared.serializers.accounts import (
    OPERATIONS,
    RESOURCE_TYPES,
    AclEntrySerializer,
    AclFilterSerializer,
)
from webui.access import console_page, console_subject
from webui.views.common import mq_errors, validate

BLANK_ENTRY = {
    "principal": "",
    "resource_type": "topic",
    "resource_name": "",
    "pattern_type": "literal",
    "operation": "read",
    "permission": "allow",
    "host": "*",
}
ENTRY_FIELDS = tuple(BLANK_ENTRY)
FILTER_FIELDS = tuple(name for name in ENTRY_FIELDS if name != "host")


def _selected(request: HttpRequest) -> tuple[dict[str, str], AclFilter, dict[str, str]]:
    """The list's filters as typed, as an :class:`AclFilter`, and their errors."""
    typed = {name: request.GET.get(name, "").strip() for name in FILTER_FIELDS}
    given = {name: value for name, value in typed.items() if value and value != "any"}
    valid, errors = validate(AclFilterSerializer, given)
    if valid is None:
        return typed, AclFilter(), errors
    return typed, valid["filter"], {}


def _entry(post: Any) -> tuple[AclEntry | None, dict[str, str], dict[str, str]]:
    values = {name: post.get(name, BLANK_ENTRY[name]).strip() for name in ENTRY_FIELDS}
    valid, errors = validate(AclEntrySerializer, {**values, "host": values["host"] or "*"})
    return (valid["entry"] if valid is not None else None), errors, values


@console_page(read_role=ADMIN, write_role=ADMIN)
def acl_list(request: HttpRequest) -> HttpResponse:
    """GET: the entries the filters select. POST: add the form's entry."""
    typed, selected, filter_errors = _selected(request)
    errors: dict[str, str] = {}
    values = dict(BLANK_ENTRY)
    if request.method == "POST":
        entry, errors, values = _entry(request.POST)
        if entry is not None:
            try:
                (new,) = service.add_acls(console_subject(request), [entry])
            except MQError as exc:
                errors = mq_errors(exc)
            else:
                verb = "added" if new else "already there"
                messages.success(request, f"ACL entry {verb}: {_sentence(entry)}.")
                return redirect("webui:acls")
    rows = service.list_acls(selected)
    return render(
        request,
        "webui/acls.html",
        {
            "section": "acls",
            "rows": [{"id": pk, **entry.as_dict()} for pk, entry in rows],
            "filters": typed,
            "filtered": any(v and v != "any" for v in typed.values()),
            "filter_errors": filter_errors,
            "errors": errors,
            "values": values,
            "operations": OPERATIONS,
            "resource_types": RESOURCE_TYPES,
        },
        status=400 if errors or filter_errors else 200,
    )


def _sentence(entry: AclEntry) -> str:
    """``allow User:svc to write topic orders-* from any host``."""
    name = entry.resource_name + ("*" if entry.pattern_type.label == "prefixed" else "")
    host = "any host" if entry.host == "*" else entry.host
    return (
        f"{entry.permission.label} {entry.principal} to {entry.operation.label} "
        f"{entry.resource_type.label} {name} from {host}"
    )


@console_page(read_role=ADMIN, write_role=ADMIN)
def acl_delete(request: HttpRequest, acl_id: int) -> HttpResponse:
    """GET: what would go, and a confirmation form. POST: delete it."""
    found = [(pk, e) for pk, e in service.list_acls(AclFilter()) if pk == acl_id]
    if not found:
        raise NotFoundError("acl_id", "not_found", f"no ACL entry {acl_id}")
    (_, entry) = found[0]
    if request.method == "POST":
        service.delete_acls(console_subject(request), AclFilter(), [acl_id])
        messages.success(request, f"ACL entry deleted: {_sentence(entry)}.")
        return redirect("webui:acls")
    return render(
        request,
        "webui/acl_delete.html",
        {"section": "acls", "acl_id": acl_id, "entry": entry.as_dict(), "said": _sentence(entry)},
    )
