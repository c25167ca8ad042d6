"""Messages: send, the three reads of a topic, lookup by id, retry and DLQ resend.

A pull with ``wait_ms`` blocks its request's thread until a message arrives or the time is
up. That is safe under Daphne: the ASGI handler (``cairn.handler``) runs each request's sync
code on a thread of its own for the request's duration (asgiref ``ThreadSensitiveContext``;
idle threads are reused, a busy one never is), so a long poll never holds the event loop or
another request; it costs one parked thread per waiting request, for at most
``CAIRN_API["MAX_WAIT_MS"]`` (30 s).

A send validates its body with :mod:`api.send_input` first (the serializer only for bodies
that are not plainly valid, so errors are the serializer's; the usual batch, text bodies and
keys only, goes to ``Broker.send`` as plain store messages) and writes its audit
row with one INSERT (:func:`accounts.audit.record_quickly`); its response is written by
:mod:`api.send_output` (the bytes DRF's renderer would write, without a dict per message).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import audit
from api.confirm import (
    CONFIRM_PARAMETERS,
    NEEDS_CONFIRMATION,
    ConfirmQuerySerializer,
    confirmation_required,
)
from api.permissions import require, require_some
from api.send_input import plain_messages, round_robin_messages
from api.send_output import send_response_json
from api.views.base import BrokerView
from api.views.schema import GROUP, MSG_ID, READ, SEND_EXAMPLE, TOPIC, responses
from cairn import archive
from mqcore.access.model import Operation, Resource, ResourceType
from mqcore.broker import copies
from mqcore.broker.types import OutgoingMessage
from mqcore.errors import NotFoundError
from mqcore.errors import ValidationError as MQValidationError
from mqcore.format.properties import PROPERTY_DLQ_ORIGIN_TOPIC, PROPERTY_RETRY_TOPIC
from mqcore.message import MessageExt
from mqcore.metadata.topics import dlq_topic_name
from shared import resends
from shared.addresses import born_host
from shared.serializers.messages import (
    MessageDetailQuerySerializer,
    MessageDetailSerializer,
    PullPageSerializer,
    ReadQuerySerializer,
    RetrySerializer,
    SendBackResultSerializer,
    SendResponseSerializer,
    SendResultSerializer,
    SendSerializer,
    message_dict,
    message_from,
    send_result,
)

DEFAULT_READ_LIMIT = 32
_MESSAGE_FIELDS = ("body", "queue_id", "delay_level", "properties", "keys", "tag", "sharding_key")
_MAX_AUDITED_IDS = 100


def check_msg_id(msg_id: str) -> str:
    if not msg_id or len(msg_id) > 64 or any(c not in "0123456789abcdefABCDEF" for c in msg_id):
        raise MQValidationError("msg_id", "format", "msg_id: expected a hex msgId or offsetMsgId")
    return msg_id


class TopicMessagesView(BrokerView):
    acl = {
        "POST": (ResourceType.TOPIC, "topic", Operation.WRITE),
        "GET": (ResourceType.TOPIC, "topic", Operation.READ),
    }

    @extend_schema(
        summary="Send messages",
        description="One message or a batch; stored all together or not at all. Returns one "
        "result per message, in order. An unknown topic is a 404 unless topic auto-creation "
        "is on (CAIRN_AUTO_CREATE_TOPICS).",
        parameters=[TOPIC],
        request=SendSerializer,
        examples=[SEND_EXAMPLE],
        responses=responses({200: SendResponseSerializer}),
    )
    def post(self, request: Request, topic: str) -> HttpResponse:
        # The well-formed body without DRF's per-field machinery; anything else (and every
        # error) through the serializer (api.send_input). The usual batch (text bodies and
        # keys only) goes round robin as store messages: no OutgoingMessage to copy.
        max_messages = int(settings.CAIRN_API["MAX_BATCH_MESSAGES"])
        host = born_host(request)
        plain = round_robin_messages(request.data, max_messages, topic, host)
        outgoing: list[OutgoingMessage] = []
        if plain is None:
            outgoing = plain_messages(request.data, max_messages) or [
                message_from(m) for m in self.body(SendSerializer)["messages"]
            ]
        if len(plain or outgoing) == 1:  # mqcore names a lone message's fields without the index
            self.mq_field_aliases = {name: f"messages[0].{name}" for name in _MESSAGE_FIELDS}
        results = self.broker.send(topic, outgoing if plain is None else plain, born_host=host)
        audit.record_quickly(
            request,
            "message.send",
            "topic",
            topic,
            new={"count": len(results), "msg_ids": [r.msg_id for r in results[:_MAX_AUDITED_IDS]]},
        )
        # The bytes JSONRenderer would write for {"results": [send_result(r), ...]}.
        return HttpResponse(send_response_json(results), content_type="application/json")

    @extend_schema(
        summary="Read messages of a topic",
        description="Three modes, chosen by the parameters: **key query** (`key`, `begin`, "
        "`end`, `limit`; for the part of the range older than the CommitLog's oldest message "
        "it also reads the data pipeline's archive, and each message says `archived`), **pull** (`queue_id`, `offset`, `limit`, `wait_ms`, `tag`: long "
        "polling when `wait_ms` > 0) or **time browse** (`begin`, `end`, `limit`, `cursor`: "
        "pages in store-time order; `exhausted` says whether the range is used up and "
        "`next_cursor` where to resume, with the same begin and end).",
        parameters=[TOPIC, ReadQuerySerializer],
        responses=responses({200: PullPageSerializer}, *READ),
    )
    def get(self, request: Request, topic: str) -> Response:
        q = self.query(ReadQuerySerializer)
        force = q["body_encoding"] == "base64"
        limit = q.get("limit", DEFAULT_READ_LIMIT)
        mode = q["mode"]
        self.broker.admin.get_topic(topic)  # 404 first, whatever the mode
        if mode == "pull":
            result = self.broker.pull(
                None,
                topic,
                q["queue_id"],
                q.get("offset", 0),
                limit,
                tag_expression=q.get("tag") or "*",
                wait_ms=q.get("wait_ms", 0),
            )
            return Response(
                {
                    "mode": mode,
                    "status": str(result.status),
                    "messages": [message_dict(m, force) for m in result.messages],
                    "next_offset": result.next_offset,
                    "min_offset": result.min_offset,
                    "max_offset": result.max_offset,
                }
            )
        begin = q.get("begin", 0)
        end = q.get("end", self.now_ms())
        if mode == "key":
            found = archive.query_by_key(self.broker, topic, q["key"], begin, end, limit)
            return Response(
                {
                    "mode": mode,
                    "begin": begin,
                    "end": end,
                    "messages": [
                        message_dict(m, force) | {"archived": archived} for m, archived in found
                    ],
                }
            )
        page = self.broker.browse(topic, begin, end, limit, q.get("cursor"))
        return Response(
            {
                "mode": mode,
                "begin": begin,
                "end": end,
                "messages": [message_dict(m, force) for m in page.messages],
                "next_cursor": page.next_cursor,
                "exhausted": page.exhausted,
            }
        )


class MessageDetailView(BrokerView):
    @extend_schema(
        summary="Get a message by id",
        description="By msgId (UNIQ_KEY) or offsetMsgId, with each group's consume status "
        "(CONSUMED, PENDING, RETRYING, DLQ).",
        parameters=[MSG_ID, MessageDetailQuerySerializer],
        responses=responses({200: MessageDetailSerializer}, *READ),
    )
    def get(self, request: Request, msg_id: str) -> Response:
        q = self.query(MessageDetailQuerySerializer)
        view = self.broker.view_message(check_msg_id(msg_id))
        if view is None:
            raise NotFoundError("msg_id", "not_found", f"no message with id {msg_id!r}")
        require(request, Operation.READ, Resource.topic(view.topic))
        data: dict[str, Any] = message_dict(view.message, q["body_encoding"] == "base64")
        data["home_topic"] = view.topic
        data["broker_name"] = view.broker_name
        data["consume_status"] = [
            {
                "group": s.group,
                "state": str(s.state),
                "committed_offset": s.committed_offset,
                "reconsume_times": s.reconsume_times,
            }
            for s in view.statuses
        ]
        return Response(data)


def original_topic(message: MessageExt) -> str:
    """The topic a retry or DLQ copy's producer sent the original to (empty: unknown)."""
    props = message.properties
    return str(props.get(PROPERTY_DLQ_ORIGIN_TOPIC) or props.get(PROPERTY_RETRY_TOPIC) or "")


class RetryView(BrokerView):
    # READ on the group (a consumer's act, as Kafka's commits), then WRITE on the message's
    # original topic: the copy goes back to that topic's consumers.
    acl = {"POST": (ResourceType.GROUP, "group", Operation.READ)}

    @extend_schema(
        summary="Send a message back for retry",
        description="What a consumer does when it fails a message: the group gets it again "
        "after the delay level's wait, or in %DLQ%<group> once retries are used up.",
        parameters=[GROUP, MSG_ID],
        request=RetrySerializer,
        responses=responses({200: SendBackResultSerializer}),
    )
    def post(self, request: Request, group: str, msg_id: str) -> Response:
        data = self.body(RetrySerializer)
        self.broker.admin.get_group(group)
        found = self.broker.get_message(check_msg_id(msg_id))
        if found is not None:  # an unknown message is send_back's 404
            require(request, Operation.WRITE, Resource.topic(copies.home_topic(found)))
        result = self.broker.send_back(
            group,
            check_msg_id(msg_id),
            data["delay_level"],
            max_reconsume_times=data.get("max_reconsume_times"),
        )
        body = {
            "action": str(result.action),
            "reconsume_times": result.reconsume_times,
            "delay_level": result.delay_level,
            "result": send_result(result.send) if result.send is not None else None,
        }
        audit.record(request, "message.retry", "message", msg_id, new={"group": group, **body})
        return Response(body)


class DlqResendView(BrokerView):
    # As the console's dead-letter page: DESCRIBE on the group, READ on %DLQ%<group>, WRITE
    # on the message's original topic.
    acl_in_view = frozenset({"POST"})

    @extend_schema(
        summary="Resend a message from the group's DLQ",
        description="Stores the %DLQ%<group> message again in its original topic (same "
        "msgId, reconsume count 0). Each resend is recorded in the audit log under the "
        "msgId (action `message.dlq_resend`). A message resent from this DLQ before answers "
        "409 with the earlier resends as `impact.resent` and is not resent, unless "
        "`?confirm=true`.",
        parameters=[GROUP, MSG_ID, *CONFIRM_PARAMETERS],
        request=None,
        responses={**responses({200: SendResultSerializer}), **NEEDS_CONFIRMATION},
    )
    def post(self, request: Request, group: str, msg_id: str) -> Response:
        confirm = self.query(ConfirmQuerySerializer)["confirm"]
        require_some(request, Operation.WRITE, ResourceType.TOPIC)
        dlq = dlq_topic_name(group)
        require(request, Operation.DESCRIBE, Resource.group(group))
        require(request, Operation.READ, Resource.topic(dlq))
        self.broker.admin.get_group(group)
        found = None
        if self.broker.metadata.topics.get(dlq) is not None:
            found = copies.find(self.broker.reader, check_msg_id(msg_id), dlq)
            if found is not None and original_topic(found):  # else resend_from_dlq's 404
                require(request, Operation.WRITE, Resource.topic(original_topic(found)))
        if found is not None and not confirm:
            before = resends.previous_resends(group, [found]).get(found.msg_id)
            if before:
                return confirmation_required(resends.impact(group, found, before))
        result = send_result(self.broker.resend_from_dlq(group, check_msg_id(msg_id)))
        audit.record(
            request,
            "message.dlq_resend",
            "message",
            found.msg_id if found is not None else result["msg_id"],
            new=resends.audit_value(group, found, result),
        )
        return Response(result)
