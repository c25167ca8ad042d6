"""``/topics`` and ``/topics/{topic}``: list, create, get, update, delete."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import audit
from accounts.acls import authorizer
from accounts.roles import subject_of
from api.confirm import (
    CHANGE_PARAMETERS,
    CONFIRM_PARAMETERS,
    NEEDS_CONFIRMATION,
    ChangeQuerySerializer,
    ConfirmQuerySerializer,
    ImpactResultSerializer,
    confirmation_required,
)
from api.permissions import require, require_some
from api.views.base import BrokerView, paginate
from api.views.schema import READ, TOPIC, TOPIC_EXAMPLE, problems, responses
from cairn import runtime
from mqcore.access.model import Operation, Resource, ResourceType
from mqcore.broker.types import TopicInfo, TopicStatus
from mqcore.errors import NotFoundError
from shared import impact
from shared.serializers.common import PageQuerySerializer
from shared.serializers.tiered import queue_rows
from shared.serializers.topics import (
    TOPIC_KINDS,
    TopicCreateSerializer,
    TopicDetailSerializer,
    TopicPageSerializer,
    TopicSerializer,
    TopicUpdateSerializer,
)


class TopicListQuerySerializer(PageQuerySerializer):
    kind = serializers.MultipleChoiceField(choices=TOPIC_KINDS, required=False)
    search = serializers.CharField(required=False, max_length=255)


class TopicListView(BrokerView):
    # Creation: CREATE on the cluster or on the topic's name, as in the console (an allow
    # entry lets a user with no role create; a deny entry refuses an operator).
    acl_in_view = frozenset({"POST"})

    @extend_schema(
        operation_id="topics_list",
        summary="List topics",
        description="Sorted by name, with queue counts and stored message totals. "
        "Filter with ?kind=normal|retry|dlq|system (repeatable) and ?search=<substring>.",
        parameters=[TopicListQuerySerializer],
        responses=responses({200: TopicPageSerializer}, *READ),
    )
    def get(self, request: Request) -> Response:
        q = self.query(TopicListQuerySerializer)
        topics = self.broker.admin.list_topics()
        if q.get("kind"):
            topics = [t for t in topics if t.kind in q["kind"]]
        if q.get("search"):
            needle = q["search"].lower()
            topics = [t for t in topics if needle in t.name.lower()]
        # Only the topics the user may describe (as Kafka's Metadata lists them).
        subject, decide = subject_of(request), authorizer()
        topics = [
            t for t in topics if decide.allowed(subject, Operation.DESCRIBE, Resource.topic(t.name))
        ]
        return Response(paginate(request, topics, self._render))

    def _render(self, topics: Any) -> list[Any]:
        rows = []
        for info in topics:
            try:
                status = self.broker.admin.topic_status(info.name)
            except NotFoundError:  # deleted since it was listed
                continue
            rows.append(TopicSerializer((info, status)).data)
        return rows

    @extend_schema(
        summary="Create a topic",
        request=TopicCreateSerializer,
        examples=[TOPIC_EXAMPLE],
        responses=responses({201: TopicDetailSerializer}),
    )
    def post(self, request: Request) -> Response:
        require_some(request, Operation.CREATE, ResourceType.TOPIC, cluster=True)
        data = self.body(TopicCreateSerializer)
        name = data.pop("name")
        require(request, Operation.CREATE, Resource.cluster(), Resource.topic(name))
        self.mq_field_aliases = {"topic_name": "name"}
        info = self.broker.admin.create_topic(name, **data)
        audit.record(request, "topic.create", "topic", name, new=info.settings())
        body = TopicDetailSerializer((info, self.broker.admin.topic_status(name))).data
        location = reverse("api:topic-detail", kwargs={"topic": name})
        return Response(body, status=201, headers={"Location": location})


class TopicDetailView(BrokerView):
    acl = {
        "GET": (ResourceType.TOPIC, "topic", Operation.DESCRIBE),
        "PATCH": (ResourceType.TOPIC, "topic", Operation.ALTER),
        "DELETE": (ResourceType.TOPIC, "topic", Operation.DELETE),
    }

    def _detail(self, info: TopicInfo, status: TopicStatus) -> Any:
        data = TopicDetailSerializer((info, status)).data
        tier = {row["queue_id"]: row for row in queue_rows(runtime.current(), info.name)}
        for queue in data["queues"]:
            queue["tier"] = tier.get(queue["queue_id"])
        return data

    @extend_schema(
        summary="Get a topic",
        description="Settings, and per queue the min/max offset, last store time and tiered "
        "storage progress (`tier`, null when the queue is not tiered).",
        parameters=[TOPIC],
        responses=responses({200: TopicDetailSerializer}, *READ),
    )
    def get(self, request: Request, topic: str) -> Response:
        info = self.broker.admin.get_topic(topic)
        return Response(self._detail(info, self.broker.admin.topic_status(topic)))

    @extend_schema(
        summary="Change a topic's settings",
        description="Lowering `read_queue_nums` strands the messages of the queues at and "
        "above the new count (consumers no longer read them): when those queues hold "
        "messages the answer is 409 with the `impact` (messages per queue, groups with lag) "
        "and nothing changes, unless `?confirm=true`. Lowering only `write_queue_nums` "
        "strands nothing and needs no confirmation.",
        parameters=[TOPIC, *CONFIRM_PARAMETERS],
        request=TopicUpdateSerializer,
        responses={**responses({200: TopicDetailSerializer}), **NEEDS_CONFIRMATION},
    )
    def patch(self, request: Request, topic: str) -> Response:
        confirm = self.query(ConfirmQuerySerializer)["confirm"]
        changes = self.body(TopicUpdateSerializer)
        old = self.broker.admin.get_topic(topic)
        found = impact.queue_shrink(
            self.broker, topic, changes.get("read_queue_nums"), changes.get("write_queue_nums")
        )
        if found["at_risk"] and not confirm:
            return confirmation_required(found)
        new = self.broker.admin.update_topic(topic, **changes)
        new_value = new.settings()
        if found["at_risk"]:
            new_value["stranded"] = found
        audit.record(request, "topic.update", "topic", topic, old=old.settings(), new=new_value)
        return Response(self._detail(new, self.broker.admin.topic_status(topic)))

    @extend_schema(
        summary="Delete a topic",
        description="Removes the topic, its queue files and every group's offsets on it. "
        "When the topic still stores messages the answer is 409 with the `impact` (messages "
        "per queue, groups with lag) and nothing changes, unless `?confirm=true`; an empty "
        "topic is deleted without it. `?dry_run=true` answers the impact only.",
        parameters=[TOPIC, *CHANGE_PARAMETERS],
        request=None,
        responses={
            204: None,
            200: ImpactResultSerializer,
            **problems(400, 401, 403, 404, 503),
            **NEEDS_CONFIRMATION,
        },
    )
    def delete(self, request: Request, topic: str) -> Response:
        flags = self.query(ChangeQuerySerializer)
        old = self.broker.admin.get_topic(topic)
        found = impact.topic_delete(self.broker, topic)
        if flags["dry_run"]:
            return Response({"dry_run": True, "impact": found})
        if found["at_risk"] and not flags["confirm"]:
            return confirmation_required(found)
        self.broker.admin.delete_topic(topic)
        audit.record(
            request, "topic.delete", "topic", topic, old=old.settings() | {"impact": found}
        )
        return Response(status=204)
