"""The send response's JSON, written directly: what the REST send path returns.

DRF renders ``{"results": [send_result(r), ...]}`` by building one dict per message and
running the generic encoder over them: for a 1000-message batch about a tenth of the
request's time. :func:`send_response_json` writes the same bytes from the SendResults with
one format string per message; the parts repeated across a batch (topic and broker name,
status and delayed flag) are encoded only when they change. The output is byte for byte
what ``JSONRenderer`` produces for the dicts of :func:`shared.serializers.messages.send_result`
(``tests/api/test_send_output.py`` compares the two).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from mqcore.broker.types import SendResult


def _quoted(text: str) -> str:
    """A JSON string as DRF's renderer writes it (UTF-8, ``ensure_ascii=False``, U+2028 and
    U+2029 escaped for JavaScript)."""
    if text.isascii() and text.isalnum():  # ids, most names: nothing to escape
        return f'"{text}"'
    return (
        json.dumps(text, ensure_ascii=False)
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


_UNSET = object()


def send_response_json(results: Sequence[SendResult]) -> bytes:
    """``{"results": [...]}`` as compact UTF-8 JSON, one object per SendResult in order."""
    parts = []
    append = parts.append
    # The topic and broker name, and the status and delayed flag, are the same for most
    # results of a send: their JSON is written again only when they change.
    last_topic: object = _UNSET
    last_broker: object = _UNSET
    last_status: object = _UNSET
    last_delayed: object = _UNSET
    middle = tail = ""
    for r in results:
        queue_id = r.queue_id
        queue_offset = r.queue_offset
        store_timestamp = r.store_timestamp
        # Exact ints only: a bool or an int subclass might not print as the JSON number.
        if not (
            queue_id.__class__ is int
            and queue_offset.__class__ is int
            and store_timestamp.__class__ is int
        ):
            raise TypeError(f"a SendResult with a non-int number: {r!r}")
        topic = r.topic
        broker_name = r.broker_name
        if topic is not last_topic or broker_name is not last_broker:
            last_topic = topic
            last_broker = broker_name
            middle = f',"topic":{_quoted(topic)},"broker_name":{_quoted(broker_name)},"queue_id":'
        status = r.status
        delayed = r.delayed
        if status is not last_status or delayed is not last_delayed:
            last_status = status
            last_delayed = delayed
            tail = f',"status":{_quoted(str(status))},"delayed":{"true" if delayed else "false"}}}'
        msg_id = r.msg_id
        offset_msg_id = r.offset_msg_id
        if (
            msg_id.isalnum()
            and offset_msg_id.isalnum()
            and msg_id.isascii()
            and offset_msg_id.isascii()
        ):
            # Hex ids, as the store makes them: nothing to escape.
            ids = f'"msg_id":"{msg_id}","offset_msg_id":"{offset_msg_id}"'
        else:
            ids = f'"msg_id":{_quoted(msg_id)},"offset_msg_id":{_quoted(offset_msg_id)}'
        append(
            f"{{{ids}{middle}{queue_id},"
            f'"queue_offset":{queue_offset},"store_timestamp":{store_timestamp}{tail}'
        )
    return ('{"results":[' + ",".join(parts) + "]}").encode("utf-8")
