"""The send response's JSON, written directly: what the REST send path returns.

DRF renders ``{"results": [send_result(r), ...]}`` by building one dict per message and
running the generic encoder over them: for a 1000-message batch about a tenth of the
request's time. :func:`send_response_json` writes the same bytes from the SendResults with
one format string per message; strings repeated across a batch (topic, broker name,
status) are encoded once. The output is byte for byte what ``JSONRenderer`` produces for
the dicts of :func:`api.serializers.messages.send_result` (``tests/api/test_send_output.py``
compares the two).
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


def send_response_json(results: Sequence[SendResult]) -> bytes:
    """``{"results": [...]}`` as compact UTF-8 JSON, one object per SendResult in order."""
    shared: dict[str, str] = {}  # topic, broker name, status: few distinct values per send
    parts = []
    for r in results:
        # Exact ints only: a bool or an int subclass might not print as the JSON number.
        if not (
            r.queue_id.__class__ is int
            and r.queue_offset.__class__ is int
            and r.store_timestamp.__class__ is int
        ):
            raise TypeError(f"a SendResult with a non-int number: {r!r}")
        topic = shared.get(r.topic)
        if topic is None:
            topic = shared[r.topic] = _quoted(r.topic)
        broker_name = shared.get(r.broker_name)
        if broker_name is None:
            broker_name = shared[r.broker_name] = _quoted(r.broker_name)
        status = shared.get(r.status)
        if status is None:
            status = shared[r.status] = _quoted(str(r.status))
        parts.append(
            f'{{"msg_id":{_quoted(r.msg_id)},"offset_msg_id":{_quoted(r.offset_msg_id)},'
            f'"topic":{topic},"broker_name":{broker_name},"queue_id":{r.queue_id},'
            f'"queue_offset":{r.queue_offset},"store_timestamp":{r.store_timestamp},'
            f'"status":{status},"delayed":{"true" if r.delayed else "false"}}}'
        )
    return ('{"results":[' + ",".join(parts) + "]}").encode("utf-8")
