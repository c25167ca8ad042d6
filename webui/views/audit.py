"""``/audit/``: who changed what, newest first (operators and admins)."""

from __future__ import annotations

import json

from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.models import AuditEntry
from accounts.roles import OPERATOR
from webui.access import console_page
from webui.names import store_name

PAGE_SIZE = 50


@console_page(read_role=OPERATOR)
def audit_log(request: HttpRequest) -> HttpResponse:
    entries = AuditEntry.objects.all()
    action = request.GET.get("action", "").strip()
    username = request.GET.get("user", "").strip()
    target = request.GET.get("target", "").strip()
    if action:
        entries = (
            entries.filter(action__startswith=action)
            if action.endswith(".")
            else entries.filter(action=action)
        )
    if username:
        entries = entries.filter(username=username)
    if target:  # Kafka's spelling (shop.orders) finds the store's (shop|orders) too
        entries = entries.filter(
            Q(target__icontains=target) | Q(target__icontains=store_name(target))
        )
    page = Paginator(entries, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [
        {
            "e": e,
            "ms": int(e.timestamp.timestamp() * 1000),
            "old": json.dumps(e.old_value, indent=2, sort_keys=True)
            if e.old_value is not None
            else "",
            "new": json.dumps(e.new_value, indent=2, sort_keys=True)
            if e.new_value is not None
            else "",
        }
        for e in page.object_list
    ]
    # order_by(): the model's default ordering (-id) would make DISTINCT per row.
    distinct = AuditEntry.objects.order_by()
    actions = sorted(distinct.values_list("action", flat=True).distinct())
    users = sorted(distinct.values_list("username", flat=True).distinct())
    return render(
        request,
        "webui/audit.html",
        {
            "section": "audit",
            "rows": rows,
            "page": page,
            "actions": actions,
            "users": users,
            "filters": {"action": action, "user": username, "target": target},
            "filtered": bool(action or username or target),
        },
    )
