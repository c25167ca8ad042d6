"""``manage.py runbroker``: a group deleted by a Kafka client (DeleteGroups) is gone from the
console's groups page, and the audit page shows the deletion with who made it and the
offsets it had (issue 21); its OffsetDelete is audited the same way."""

from __future__ import annotations

import html
import re
import signal
import warnings
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_for_port
from tests.support.manage import broker_env, start_runbroker

from .test_runbroker import Rest

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.admin import NewTopic
    from kafka.structs import OffsetAndMetadata

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def page(rest: Rest, path: str) -> str:
    with rest.opener.open(rest.base + path, timeout=10) as response:
        return str(response.read().decode())


def test_group_deleted_over_kafka_leaves_the_console_and_is_audited(tmp_path: Path) -> None:
    http_port, kafka_port = free_port(), free_port()
    with (tmp_path / "broker.log").open("wb") as log:
        proc = start_runbroker(broker_env(tmp_path, http_port, kafka_port), output=log)
        try:
            wait_for_port(http_port, 60, proc)
            wait_for_port(kafka_port, 30, proc)
            admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{kafka_port}")
            try:
                admin.create_topics([NewTopic("shop.orders", 2, 1)])
                offsets = {
                    TopicPartition("shop.orders", 0): OffsetAndMetadata(5, "", -1),
                    TopicPartition("shop.orders", 1): OffsetAndMetadata(6, "", -1),
                }
                admin.alter_group_offsets("old.team", offsets)
                password = (tmp_path / "first-admin-password").read_text().strip()
                rest = Rest(f"http://127.0.0.1:{http_port}", "admin", password)
                assert "old|team" in page(rest, "/groups/")
                admin.delete_group_offsets("old.team", [TopicPartition("shop.orders", 1)])
                assert admin.delete_groups(["old.team"]) == {"old.team": "OK"}
            finally:
                admin.close()
            groups = page(rest, "/groups/")
            assert "old|team" not in groups
            audit = html.unescape(page(rest, "/audit/?target=old"))
            rows = re.findall(r"<tr>.*?</tr>", audit, re.S)
            deleted = [r for r in rows if "<code>group.delete</code>" in r]
            trimmed = [r for r in rows if "<code>group.offsets.delete</code>" in r]
            assert len(deleted) == 1 and len(trimmed) == 1
            assert ">anonymous <" in deleted[0] and '"offset": 5' in deleted[0]
            assert '"queue_id": 1' in trimmed[0] and '"offset": 6' in trimmed[0]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    assert proc.returncode == 0, (tmp_path / "broker.log").read_text()[-3000:]
