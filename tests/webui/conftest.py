"""A running broker runtime over a ``tmp_path`` store, installed as the process's runtime,
and users of each role."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.roles import ADMIN, OPERATOR, VIEWER, set_role
from cairn import runtime
from cairn.runtime import BrokerRuntime
from mqcore.broker import Broker, OutgoingMessage, SendResult
from mqcore.store import StoreConfig
from webui.bridge import bridge

PASSWORD = "correct horse battery staple"


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    """Django's default hasher costs a second per user; tests need no strength."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[BrokerRuntime]:
    """A started runtime (inline reput, flush ... loops) over ``tmp_path/store``."""
    small = StoreConfig(
        commitlog_file_size=4 * 1024 * 1024 + 128 * 1024,
        consume_queue_file_entries=1000,
        index_hash_slots=1000,
        index_max_entries=4000,
    )
    instance = BrokerRuntime(
        store_dir=tmp_path / "store", services_mode="inline", store_config=small
    )
    instance.start()
    runtime.install(instance)
    try:
        yield instance
    finally:
        bridge.detach()
        instance.stop()
        runtime.reset()


@pytest.fixture
def broker(rt: BrokerRuntime) -> Broker:
    assert rt.broker is not None
    return rt.broker


def send(broker: Broker, topic: str, body: bytes = b"hello", **fields: Any) -> SendResult:
    (result,) = broker.send(topic, [OutgoingMessage(body=body, **fields)])
    return result


def make_user(username: str, role: str | None) -> Any:
    user = get_user_model().objects.create_user(username, password=PASSWORD)
    if role is not None:
        set_role(user, role)
    return user


@pytest.fixture
def viewer(db: None) -> Any:
    return make_user("vera", VIEWER)


@pytest.fixture
def operator(db: None) -> Any:
    return make_user("otto", OPERATOR)


@pytest.fixture
def admin(db: None) -> Any:
    return make_user("ada", ADMIN)


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client
