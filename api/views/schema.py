"""OpenAPI helpers: the problem+json responses every operation may give."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse

from api.exceptions import PROBLEM_CONTENT_TYPE
from shared.serializers.common import ProblemSerializer

_MEANING = {
    400: "invalid input (field and rule say what)",
    401: "not authenticated",
    403: "your role, or the broker's perm bits, do not allow it",
    404: "no such topic, group, message, user or token",
    405: "method not allowed",
    409: "it exists already",
    413: "message or request too large",
    415: "unsupported media type",
    429: "too many failed logins, or the account is locked out (Retry-After says how long)",
    503: "the broker is not running",
}
READ = (400, 401, 403, 404, 503)
WRITE = (400, 401, 403, 404, 409, 413, 415, 503)


def problems(*statuses: int) -> dict[Any, Any]:
    """``responses`` entries for the given statuses, as application/problem+json."""
    wanted = statuses or WRITE
    return {
        (status, PROBLEM_CONTENT_TYPE): OpenApiResponse(
            ProblemSerializer, description=_MEANING[status]
        )
        for status in wanted
    }


def responses(ok: dict[Any, Any], *statuses: int) -> dict[Any, Any]:
    return {**ok, **problems(*statuses)}


def path_param(
    name: str, description: str, pattern: str | None = None, example: str | None = None
) -> OpenApiParameter:
    return OpenApiParameter(
        name,
        {"type": "string", **({"pattern": pattern} if pattern else {})},  # type: ignore[arg-type]
        OpenApiParameter.PATH,
        description=description,
        examples=[OpenApiExample(example, value=example)] if example else None,
    )


_NAME = r"^[%|a-zA-Z0-9_-]{1,255}$"
TOPIC = path_param(
    "topic", "topic name (URL-encode % as %25: %25RETRY%25group)", _NAME, "TopicTest"
)
GROUP = path_param("group", "subscription group name", r"^[%|a-zA-Z0-9_-]{1,120}$", "group_a")
MSG_ID = path_param("msg_id", "msgId (UNIQ_KEY) or offsetMsgId, hex", r"^[0-9A-Fa-f]{1,64}$")


def request_example(name: str, value: object) -> OpenApiExample:
    return OpenApiExample(name, value=value, request_only=True)


SEND_EXAMPLE = request_example(
    "one text message",
    {
        "messages": [
            {
                "body": "order 42 paid",
                "keys": ["order-42"],
                "tag": "paid",
                "properties": {"source": "billing"},
            }
        ]
    },
)
TOPIC_EXAMPLE = request_example(
    "a topic with 4 queues",
    {"name": "TopicTest2", "read_queue_nums": 4, "write_queue_nums": 4, "perm": 6},
)
GROUP_EXAMPLE = request_example("a group", {"name": "group_b", "retry_max_times": 3})
OFFSETS_EXAMPLE = request_example(
    "commit two queues",
    {
        "offsets": [
            {"topic": "TopicTest", "queue_id": 0, "offset": 1},
            {"topic": "TopicTest", "queue_id": 1, "offset": 0},
        ]
    },
)
RESET_EXAMPLE = request_example(
    "rewind to the start (dry run)", {"topic": "TopicTest", "to": "earliest", "dry_run": True}
)
