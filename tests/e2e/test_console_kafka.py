"""The console in a real browser, showing what Kafka clients did (issue 21): a record's Kafka
headers on its message page (never the listener's ``__kafka.*`` properties), and a group
deleted over Kafka gone from the groups page, its deletion on the audit page."""

from __future__ import annotations

import signal
import subprocess
import urllib.parse
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import free_port, wait_for_port
from tests.e2e.conftest import PASSWORD, log_in, new_context, shot
from tests.support.manage import (
    SHARED_SETTINGS,
    ApiClient,
    broker_env,
    create_token,
    manage,
    start_runbroker,
)

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.structs import OffsetAndMetadata

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def kafka_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """runbroker with its Kafka port on: (console base URL, Kafka bootstrap, operator token)."""
    data_dir = tmp_path_factory.mktemp("cairn-e2e-kafka")
    http_port, kafka_port = free_port(), free_port()
    env = broker_env(
        data_dir, http_port, kafka_port, drop=SHARED_SETTINGS, DJANGO_SUPERUSER_PASSWORD=PASSWORD
    )
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com")
    token = create_token(env, "bot", "operator")
    with (data_dir / "broker.log").open("wb") as log:
        proc = start_runbroker(env, log)
        try:
            wait_for_port(http_port, 60, proc)
            wait_for_port(kafka_port, 30, proc)
            yield f"http://127.0.0.1:{http_port}", f"127.0.0.1:{kafka_port}", token
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = new_context(browser, viewport={"width": 1360, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    context.close()
    assert not errors, errors


def test_kafka_headers_and_group_deletion_in_the_console(
    kafka_server: tuple[str, str, str], page: Any
) -> None:
    from playwright.sync_api import expect

    base, bootstrap, token = kafka_server
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic("shop.orders", 1, 1)])
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        headers = [("trace", b"t-1"), ("trace", b"t-2"), ("blob", b"\xff\xfe")]
        producer.send("shop.orders", key=b"order-7", value=b"{}", headers=headers).get(10)
        producer.close()
        offsets = {TopicPartition("shop.orders", 0): OffsetAndMetadata(1, "", -1)}
        admin.alter_group_offsets("old.team", offsets)

        rest = ApiClient(base, token)
        topic = urllib.parse.quote("shop|orders", safe="")
        [found] = rest.call("GET", f"/topics/{topic}/messages", params={"key": "order-7"})[
            "messages"
        ]
        log_in(page, base)
        page.goto(f"{base}/messages/{found['offset_msg_id']}/")
        rows = page.get_by_test_id("kafka-headers").locator("tr")
        expect(rows).to_have_count(3)
        expect(rows.nth(0)).to_contain_text("t-1")
        expect(rows.nth(1)).to_contain_text("t-2")
        expect(rows.nth(2)).to_contain_text("//4=")
        expect(rows.nth(2)).to_contain_text("(base64)")
        assert "__kafka." not in page.content()
        shot(page, "kafka-message-headers")

        page.goto(f"{base}/groups/")
        expect(page.locator("main")).to_contain_text("old|team")
        assert admin.delete_groups(["old.team"]) == {"old.team": "OK"}
    finally:
        admin.close()
    page.reload()
    expect(page.locator("main")).not_to_contain_text("old|team")
    shot(page, "kafka-group-deleted")
    page.goto(f"{base}/audit/?action=group.delete")
    row = page.get_by_test_id("audit-table").locator("tbody tr").first
    expect(row).to_contain_text("group.delete")
    expect(row).to_contain_text("old|team")
    shot(page, "kafka-group-deleted-audit")
