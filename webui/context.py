"""Template context for every console page: the user's role and what it allows."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

import mqcore
from accounts.roles import ADMIN, OPERATOR, has_role, role_of
from cairn import runtime
from mqcore.access.model import Operation, Resource


def console(request: HttpRequest) -> dict[str, Any]:
    from webui.access import may

    user = getattr(request, "user", None)
    broker = runtime.current().broker
    signed_in = user is not None and user.is_authenticated
    return {
        "console_role": role_of(user),
        "can_operate": has_role(user, OPERATOR),
        "can_admin": has_role(user, ADMIN),
        # The header's links: what the pages behind them let this user in to.
        "nav_config": signed_in and may(request, Operation.DESCRIBE, Resource.cluster()),
        "cairn_version": mqcore.__version__,
        "broker_name": broker.broker_name if broker is not None else "",
        "broker_running": broker is not None and broker.started,
        # The header's broker chip turns amber on every page while the store is degraded.
        "store_degraded": broker is not None and broker.store.health.status == "degraded",
    }
