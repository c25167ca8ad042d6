"""Every endpoint against every role: viewers read, operators change the broker, admins also
import config and manage users. Only the status code class matters here (403 or not)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from mqcore.broker import Broker
from tests.api.conftest import send

pytestmark = pytest.mark.django_db

READS = [
    "/api/v1/topics",
    "/api/v1/topics/orders",
    "/api/v1/topics/orders/messages?queue_id=0",
    "/api/v1/topics/orders/messages?key=k",
    "/api/v1/topics/orders/messages",
    "/api/v1/messages/{msg_id}",
    "/api/v1/groups",
    "/api/v1/groups/billing",
    "/api/v1/groups/billing/lag",
    "/api/v1/groups/billing/offsets",
    "/api/v1/config/topics.json",
    "/api/v1/config/subscriptionGroup.json",
    "/api/v1/config/consumerOffset.json",
    "/api/v1/status",
]
OPERATOR_WRITES: list[tuple[str, str, Any]] = [
    ("post", "/api/v1/topics", {"name": "new-topic"}),
    ("patch", "/api/v1/topics/orders", {"perm": 6}),
    ("post", "/api/v1/topics/orders/messages", {"messages": [{"body": "x"}]}),
    ("post", "/api/v1/groups", {"name": "new-group"}),
    ("patch", "/api/v1/groups/billing", {"retry_max_times": 5}),
    (
        "put",
        "/api/v1/groups/billing/offsets",
        {"offsets": [{"topic": "orders", "queue_id": 0, "offset": 0}]},
    ),
    ("post", "/api/v1/groups/billing/offsets/reset", {"topic": "orders", "to": "latest"}),
    ("post", "/api/v1/groups/billing/messages/{msg_id}/retry", {}),
    ("post", "/api/v1/groups/billing/dlq/{msg_id}/resend", None),
    ("delete", "/api/v1/groups/billing", None),
    ("delete", "/api/v1/topics/orders", None),
]
ADMIN_ONLY: list[tuple[str, str, Any]] = [
    ("get", "/api/v1/users", None),
    ("post", "/api/v1/users", {"username": "someone", "role": "viewer"}),
    ("get", "/api/v1/users/vera", None),
    ("patch", "/api/v1/users/vera", {"role": "viewer"}),
    ("post", "/api/v1/users/vera/unlock", None),
    ("post", "/api/v1/tokens", {"name": "for-ada", "username": "ada"}),
    ("get", "/api/v1/tokens?username=ada", None),
    ("get", "/api/v1/acls", None),
    (
        "post",
        "/api/v1/acls",
        {
            "entries": [
                {
                    "principal": "User:x",
                    "resource_type": "topic",
                    "resource_name": "t",
                    "operation": "read",
                    "permission": "allow",
                }
            ]
        },
    ),
    ("delete", "/api/v1/acls?principal=User:x", None),
]
CONFIG_IMPORTS = ["topics.json", "subscriptionGroup.json", "consumerOffset.json"]


@pytest.fixture
def msg_id(broker: Broker, topic: str, group: str) -> str:
    (result,) = send(broker, topic, b"x", queue_id=0)
    return result.msg_id


def call(client: APIClient, method: str, path: str, body: Any) -> Any:
    return (
        getattr(client, method)(path, body, format="json")
        if body is not None
        else getattr(client, method)(path)
    )


def test_every_role_reads(
    viewer: APIClient, operator: APIClient, admin: APIClient, msg_id: str
) -> None:
    for client in (viewer, operator, admin):
        for path in READS:
            r = client.get(path.format(msg_id=msg_id))
            assert r.status_code == 200, (client.user.username, path, r.content[:300])


def test_viewer_may_change_nothing(viewer: APIClient, msg_id: str) -> None:
    for method, path, body in OPERATOR_WRITES + ADMIN_ONLY:
        r = call(viewer, method, path.format(msg_id=msg_id), body)
        assert r.status_code == 403, (method, path, r.status_code)
    for name in CONFIG_IMPORTS:
        assert (
            viewer.put(f"/api/v1/config/{name}", "{}", content_type="application/json").status_code
            == 403
        )
    assert viewer.get("/api/v1/audit").status_code == 403


def test_operator_changes_the_broker_but_not_config_or_users(
    operator: APIClient, msg_id: str
) -> None:
    for method, path, body in OPERATOR_WRITES:
        r = call(operator, method, path.format(msg_id=msg_id), body)
        assert r.status_code != 403 and r.status_code < 500, (
            method,
            path,
            r.status_code,
            r.content[:300],
        )
    for method, path, body in ADMIN_ONLY:
        assert call(operator, method, path, body).status_code == 403, (method, path)
    for name in CONFIG_IMPORTS:
        assert (
            operator.put(
                f"/api/v1/config/{name}", "{}", content_type="application/json"
            ).status_code
            == 403
        )
    assert operator.get("/api/v1/audit").status_code == 200


def test_admin_may_do_everything(admin: APIClient, viewer: APIClient, msg_id: str) -> None:
    for method, path, body in OPERATOR_WRITES + ADMIN_ONLY:
        r = call(admin, method, path.format(msg_id=msg_id), body)
        assert r.status_code != 403 and r.status_code < 500, (
            method,
            path,
            r.status_code,
            r.content[:300],
        )
    for name in CONFIG_IMPORTS:
        doc = admin.get(f"/api/v1/config/{name}").content
        assert (
            admin.put(f"/api/v1/config/{name}", doc, content_type="application/json").status_code
            == 200
        )
    assert admin.get("/api/v1/audit").status_code == 200


def test_anonymous_gets_401_everywhere(anonymous: APIClient, msg_id: str) -> None:
    for path in [*READS, "/api/v1/audit"]:
        assert anonymous.get(path.format(msg_id=msg_id)).status_code == 401, path
    for method, path, body in OPERATOR_WRITES + ADMIN_ONLY:
        assert call(anonymous, method, path.format(msg_id=msg_id), body).status_code == 401, path
