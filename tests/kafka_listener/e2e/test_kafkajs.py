"""kafkajs 2.2.4 (npm, pinned in ``js/package.json``, installed by ``tools/node-deps.sh``)
against the listener: resetOffsets, createTopics with configs Cairn cannot honour,
deleteGroups (issue 21). Each operation runs ``js/kafkajs_driver.js`` under node."""

from __future__ import annotations

import json
import shutil
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..harness import RunningListener

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

pytestmark = pytest.mark.e2e

JS = Path(__file__).parent / "js"


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node")
    if found is None or not (JS / "node_modules" / "kafkajs").is_dir():
        pytest.fail("kafkajs is not installed: run tools/node-deps.sh (tools/test.sh does)")
    return found


def kafkajs(node: str, running: RunningListener, op: str, **args: Any) -> Any:
    """Run one driver operation; its ``{"ok": ...}`` or ``{"error": ...}``."""
    payload = json.dumps({"op": op, "bootstrap": running.bootstrap, **args})
    done = subprocess.run(
        [node, str(JS / "kafkajs_driver.js"), payload],
        cwd=JS,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def produce(running: RunningListener, topic: str, values: list[str]) -> None:
    producer = KafkaProducer(bootstrap_servers=running.bootstrap)
    for value in values:
        producer.send(topic, value.encode())
    producer.flush()
    producer.close()


def create(running: RunningListener, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()


def test_reset_offsets_earliest_and_latest(
    node: str, running: RunningListener, names: Callable[[str], str]
) -> None:
    topic, group = names("orders"), names("billing")
    store_group = group.replace(".", "|")
    create(running, topic)
    first = [f"m{i}" for i in range(5)]
    produce(running, topic, first)
    got = kafkajs(node, running, "consume", topic=topic, group=group, fromBeginning=True,
                  expect=5)  # fmt: skip
    assert got == {"ok": first}
    assert running.broker is not None
    assert running.broker.get_offsets(store_group) == {topic.replace(".", "|"): {0: 5}}

    # Earliest: kafkajs commits the placeholder -2, which is stored and fetched as it is;
    # the group then consumes from the start again (kafkajs resolves -2 with fromBeginning).
    assert kafkajs(node, running, "resetOffsets", topic=topic, group=group, earliest=True) == {
        "ok": "returned"
    }
    assert running.broker.get_offsets(store_group) == {topic.replace(".", "|"): {0: -2}}
    assert kafkajs(node, running, "fetchOffsets", topic=topic, group=group) == {"ok": [[0, "-2"]]}
    again = kafkajs(node, running, "consume", topic=topic, group=group, fromBeginning=True,
                    expect=5)  # fmt: skip
    assert again == {"ok": first}
    assert running.broker.get_offsets(store_group) == {topic.replace(".", "|"): {0: 5}}

    # Latest: records stored before the reset are skipped, only later ones are consumed.
    produce(running, topic, ["skipped-1", "skipped-2"])
    assert kafkajs(node, running, "resetOffsets", topic=topic, group=group, earliest=False) == {
        "ok": "returned"
    }
    assert running.broker.get_offsets(store_group) == {topic.replace(".", "|"): {0: -1}}
    after = kafkajs(node, running, "consume", topic=topic, group=group, fromBeginning=False,
                    expect=2, produceAfterFetch=["n0", "n1"])  # fmt: skip
    assert after == {"ok": ["n0", "n1"]}


@pytest.mark.parametrize(
    "config",
    [
        {"name": "no.such.config", "value": "1"},
        {"name": "cleanup.policy", "value": "compact"},
        {"name": "retention.ms", "value": "1000"},
    ],
)
def test_create_topics_with_a_config_cairn_cannot_honour(
    node: str,
    running: RunningListener,
    names: Callable[[str], str],
    config: dict[str, str],
) -> None:
    """kafkajs shows its own text for the code (the broker's message is checked with
    confluent-kafka, which shows it)."""
    topic = names("configured")
    reply = kafkajs(node, running, "createTopics", topic=topic, configs=[config])
    error = reply["error"]
    assert error["name"] == "KafkaJSAggregateError"
    [cause] = error["errors"]
    assert cause["type"] == "INVALID_CONFIG"
    listed = kafkajs(node, running, "listTopics")["ok"]
    assert topic not in listed


def test_delete_groups(node: str, running: RunningListener, names: Callable[[str], str]) -> None:
    topic, idle, live = names("orders"), names("idle"), names("live")
    create(running, topic)
    produce(running, topic, ["a"])
    assert kafkajs(node, running, "consume", topic=topic, group=idle, fromBeginning=True,
                   expect=1) == {"ok": ["a"]}  # fmt: skip
    assert running.broker is not None
    assert running.broker.get_offsets(idle.replace(".", "|")) != {}
    deleted = kafkajs(node, running, "deleteGroups", groups=[idle])
    assert deleted == {"ok": [{"groupId": idle, "errorCode": 0}]}
    assert running.broker.get_offsets(idle.replace(".", "|")) == {}
    assert idle.replace(".", "|") not in [g.name for g in running.broker.admin.list_groups()]
    again = kafkajs(node, running, "deleteGroups", groups=[idle])
    assert again["error"]["groups"] == [
        {"groupId": idle, "errorCode": 69, "type": "GROUP_ID_NOT_FOUND"}
    ]

    refused = kafkajs(node, running, "deleteLiveGroup", topic=topic, group=live)
    assert refused["error"]["groups"] == [
        {"groupId": live, "errorCode": 68, "type": "NON_EMPTY_GROUP"}
    ]
