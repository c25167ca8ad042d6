"""Template context for every console page: the user's role and what it allows."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

import mqcore
from api.roles import ADMIN, OPERATOR, has_role, role_of
from cairn import runtime


def console(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    broker = runtime.current().broker
    return {
        "console_role": role_of(user),
        "can_operate": has_role(user, OPERATOR),
        "can_admin": has_role(user, ADMIN),
        "cairn_version": mqcore.__version__,
        "broker_name": broker.broker_name if broker is not None else "",
        "broker_running": broker is not None and broker.started,
        # The header's broker chip turns amber on every page while the store is degraded.
        "store_degraded": broker is not None and broker.store.health.status == "degraded",
    }
