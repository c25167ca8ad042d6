"""API test fixtures: a real broker runtime over a ``tmp_path`` store, and clients per role.

``broker_runtime`` starts the same :class:`~cairn.runtime.BrokerRuntime` that ``runbroker``
starts (store, metadata, broker, the reput/flush/delay/offsets service loops), over small
segments, and installs it as ``runtime.current()`` so the views use it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from accounts.roles import set_role
from cairn import runtime
from cairn.runtime import BrokerRuntime
from mqcore.broker import Broker, BrokerConfig, OutgoingMessage
from mqcore.store import StoreConfig
from tests.support.tokens import make_token

SMALL_STORE = StoreConfig(
    commitlog_file_size=256 * 1024,
    consume_queue_file_entries=64,
    index_hash_slots=64,
    index_max_entries=256,
    max_message_size=64 * 1024,
)


def make_runtime(root: Path, **broker_options: Any) -> BrokerRuntime:
    return BrokerRuntime(
        store_dir=root,
        services_mode="inline",
        store_config=SMALL_STORE,
        broker_config=BrokerConfig(**broker_options),
    )


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def broker_options() -> dict[str, Any]:
    """BrokerConfig overrides; a test module may override this fixture."""
    return {}


@pytest.fixture
def broker_runtime(tmp_path: Path, broker_options: dict[str, Any]) -> Iterator[BrokerRuntime]:
    rt = make_runtime(tmp_path / "store", **broker_options)
    rt.start()
    runtime.install(rt)
    try:
        yield rt
    finally:
        rt.stop()
        runtime.reset()


@pytest.fixture
def broker(broker_runtime: BrokerRuntime) -> Broker:
    assert broker_runtime.broker is not None
    return broker_runtime.broker


def wait_dispatched(broker: Broker, timeout_s: float = 5.0) -> None:
    """Wait until the reput loop has dispatched everything appended so far."""
    deadline = time.monotonic() + timeout_s
    while broker.store.dispatch_behind_bytes > 0:
        if time.monotonic() > deadline:
            raise TimeoutError("reput did not catch up")
        time.sleep(0.005)


@pytest.fixture
def make_user(db: None) -> Callable[..., Any]:
    def make(username: str, role: str | None) -> Any:
        user = get_user_model().objects.create_user(username, password="pw-" + username)
        if role is not None:
            set_role(user, role)
        return user

    return make


def token_client(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {make_token(user)}")
    client.user = user  # type: ignore[attr-defined]
    return client


@pytest.fixture
def viewer(make_user: Callable[..., Any], broker_runtime: BrokerRuntime) -> APIClient:
    return token_client(make_user("vera", "viewer"))


@pytest.fixture
def operator(make_user: Callable[..., Any], broker_runtime: BrokerRuntime) -> APIClient:
    return token_client(make_user("otto", "operator"))


@pytest.fixture
def admin(make_user: Callable[..., Any], broker_runtime: BrokerRuntime) -> APIClient:
    return token_client(make_user("ada", "admin"))


@pytest.fixture
def anonymous(db: None, broker_runtime: BrokerRuntime) -> APIClient:
    return APIClient()


@pytest.fixture
def topic(broker: Broker) -> str:
    """A topic with 4 queues."""
    broker.admin.create_topic("orders", read_queue_nums=4, write_queue_nums=4)
    return "orders"


@pytest.fixture
def group(broker: Broker) -> str:
    broker.admin.create_group("billing", retry_max_times=2)
    return "billing"


def send(broker: Broker, topic: str, *bodies: bytes, **fields: Any) -> list[Any]:
    """Send through the broker (not the API) and wait until dispatched."""
    results = broker.send(topic, [OutgoingMessage(body=b, **fields) for b in bodies])
    wait_dispatched(broker)
    return results


def assert_problem(
    response: Any, status: int, field: str | None = None, rule: str | None = None
) -> dict[str, Any]:
    """The response is problem+json with this status (and field and rule, when given)."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"] == "application/problem+json", response["Content-Type"]
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert set(body) >= {"type", "title", "status", "detail", "field", "rule", "errors"}
    if field is not None:
        assert body["field"] == field, body
    if rule is not None:
        assert body["rule"] == rule, body
    return body
