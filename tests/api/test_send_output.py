"""api.send_output writes the send response byte for byte as DRF's JSONRenderer would."""

from __future__ import annotations

import json

import pytest
from rest_framework.renderers import JSONRenderer

from api.send_output import send_response_json
from mqcore.broker.types import SendResult, SendStatus
from shared.serializers.messages import send_result

NAMES = [
    "Orders",
    "%RETRY%group-1",
    "rmq_sys_X|y",
    "héllo",
    'q"uote\\back',
    "line\u2028sep\u2029",
    "tab\tctl\x1f",
    "emoji-😀",
]


def result(i: int, topic: str, **changes: object) -> SendResult:
    values: dict[str, object] = {
        "status": SendStatus.SEND_OK,
        "msg_id": f"AC1100010000{i:020X}",
        "offset_msg_id": f"7F00000100002A9F{i * 301:016X}",
        "topic": topic,
        "queue_id": i % 8,
        "queue_offset": i * 7,
        "broker_name": "broker-a",
        "store_timestamp": 1_700_000_000_000 + i,
        "delayed": False,
    }
    values.update(changes)
    return SendResult(**values)  # type: ignore[arg-type]


def drf(results: list[SendResult]) -> bytes:
    return bytes(JSONRenderer().render({"results": [send_result(r) for r in results]}))


@pytest.mark.parametrize("name", NAMES)
def test_bytes_equal_drfs_for_every_kind_of_name(name: str) -> None:
    results = [
        result(0, name),
        result(1, name, broker_name=name, status=SendStatus.FLUSH_DISK_TIMEOUT),
        result(2, "Orders", msg_id=name, offset_msg_id=name, delayed=True),
        result(3, name, queue_id=0, queue_offset=0, store_timestamp=0),
    ]
    assert send_response_json(results) == drf(results)
    assert json.loads(send_response_json(results))["results"][0]["topic"] == name


def test_a_batch_and_a_single_result() -> None:
    batch = [result(i, "Orders") for i in range(1000)]
    assert send_response_json(batch) == drf(batch)
    assert send_response_json(batch[:1]) == drf(batch[:1])


def test_numbers_must_be_plain_ints() -> None:
    with pytest.raises(TypeError):
        send_response_json([result(0, "Orders", queue_offset=True)])
