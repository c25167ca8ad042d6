"""``/groups``: subscription groups, their lag, committed offsets and offset resets.

The REST API never creates a group by using it (RocketMQ's ``autoCreateSubscriptionGroup``
applies to clients): offsets and resets of an unknown group are a 404.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import audit
from accounts.acls import authorizer
from accounts.roles import subject_of
from api.confirm import (
    CHANGE_PARAMETERS,
    NEEDS_CONFIRMATION,
    ChangeQuerySerializer,
    ImpactResultSerializer,
    confirmation_required,
)
from api.permissions import require
from api.views.base import BrokerView, paginate
from api.views.schema import (
    GROUP,
    GROUP_EXAMPLE,
    OFFSETS_EXAMPLE,
    READ,
    RESET_EXAMPLE,
    problems,
    responses,
)
from mqcore.access.model import Operation, Resource, ResourceType
from mqcore.broker.types import GroupInfo
from shared import impact
from shared.serializers.common import PageQuerySerializer
from shared.serializers.groups import (
    GroupCreateSerializer,
    GroupLagSerializer,
    GroupOffsetsSerializer,
    GroupPageSerializer,
    GroupSerializer,
    GroupUpdateSerializer,
    OffsetsSerializer,
    ResetResultSerializer,
    ResetSerializer,
    TopicFilterSerializer,
    group_dict,
    lag_dict,
    offsets_dict,
    plan_dict,
)

_TOPIC_FILTER = TopicFilterSerializer


def _settings(g: GroupInfo) -> dict[str, Any]:
    data = group_dict(g)
    for derived in ("broker_name", "system", "topics"):
        data.pop(derived)
    return data


class GroupListView(BrokerView):
    @extend_schema(
        operation_id="groups_list",
        summary="List subscription groups",
        parameters=[PageQuerySerializer],
        responses=responses({200: GroupPageSerializer}, *READ),
    )
    def get(self, request: Request) -> Response:
        # Only the groups the user may describe (as the topic list and the console show them).
        subject, current = subject_of(request), authorizer()
        groups = [
            g
            for g in self.broker.admin.list_groups()
            if current.allowed(subject, Operation.DESCRIBE, Resource.group(g.name))
        ]
        return Response(paginate(request, groups, lambda page: [group_dict(g) for g in page]))

    @extend_schema(
        summary="Create a subscription group",
        request=GroupCreateSerializer,
        examples=[GROUP_EXAMPLE],
        responses=responses({201: GroupSerializer}),
    )
    def post(self, request: Request) -> Response:
        data = self.body(GroupCreateSerializer)
        name = data.pop("name")
        self.mq_field_aliases = {"group_name": "name"}
        info = self.broker.admin.create_group(name, **data)
        audit.record(request, "group.create", "group", name, new=_settings(info))
        location = reverse("api:group-detail", kwargs={"group": name})
        return Response(group_dict(info), status=201, headers={"Location": location})


class GroupDetailView(BrokerView):
    # PATCH (group settings) stays the operator role's, as group create (POST /groups) and
    # the console's group edit: no Kafka operation matches it. Like the console's edit page
    # it also needs DESCRIBE on the group (a deny entry hides the group from its operator).
    acl = {
        "GET": (ResourceType.GROUP, "group", Operation.DESCRIBE),
        "DELETE": (ResourceType.GROUP, "group", Operation.DELETE),
    }

    @extend_schema(
        summary="Get a subscription group",
        parameters=[GROUP],
        responses=responses({200: GroupSerializer}, *READ),
    )
    def get(self, request: Request, group: str) -> Response:
        return Response(group_dict(self.broker.admin.get_group(group)))

    @extend_schema(
        summary="Change a group's settings",
        parameters=[GROUP],
        request=GroupUpdateSerializer,
        responses=responses({200: GroupSerializer}),
    )
    def patch(self, request: Request, group: str) -> Response:
        require(request, Operation.DESCRIBE, Resource.group(group))
        changes = self.body(GroupUpdateSerializer)
        old = self.broker.admin.get_group(group)
        new = self.broker.admin.update_group(group, **changes)
        audit.record(
            request, "group.update", "group", group, old=_settings(old), new=_settings(new)
        )
        return Response(group_dict(new))

    @extend_schema(
        summary="Delete a subscription group",
        description="Also removes its committed offsets; its retry and DLQ topics stay. When "
        "the group is behind where it committed (messages it has not consumed yet) the answer "
        "is 409 with the `impact` (lag per topic and queue) and nothing changes, unless "
        "`?confirm=true`; a group with no lag is deleted without it. `?dry_run=true` answers "
        "the impact only.",
        parameters=[GROUP, *CHANGE_PARAMETERS],
        request=None,
        responses={
            204: None,
            200: ImpactResultSerializer,
            **problems(400, 401, 403, 404, 503),
            **NEEDS_CONFIRMATION,
        },
    )
    def delete(self, request: Request, group: str) -> Response:
        flags = self.query(ChangeQuerySerializer)
        old = self.broker.admin.get_group(group)
        found = impact.group_delete(self.broker, group)
        if flags["dry_run"]:
            return Response({"dry_run": True, "impact": found})
        if found["at_risk"] and not flags["confirm"]:
            return confirmation_required(found)
        offsets = self.broker.get_offsets(group)
        self.broker.admin.delete_group(group)
        old_value = {**_settings(old), "offsets": offsets_dict(group, offsets)["offsets"]}
        if found["lag"]:
            old_value["impact"] = found
        audit.record(request, "group.delete", "group", group, old=old_value)
        return Response(status=204)


class GroupLagView(BrokerView):
    acl = {"GET": (ResourceType.GROUP, "group", Operation.DESCRIBE)}

    @extend_schema(
        summary="A group's lag",
        description="Per topic and queue (messages behind, age of the oldest unconsumed "
        "message) and a summary (total, worst queue).",
        parameters=[GROUP, _TOPIC_FILTER],
        responses=responses({200: GroupLagSerializer}, *READ),
    )
    def get(self, request: Request, group: str) -> Response:
        topic = self.query(TopicFilterSerializer).get("topic")
        return Response(lag_dict(self.broker.admin.group_lag(group, topic)))


class GroupOffsetsView(BrokerView):
    acl = {
        "GET": (ResourceType.GROUP, "group", Operation.DESCRIBE),
        "PUT": (ResourceType.GROUP, "group", Operation.READ),
    }

    @extend_schema(
        summary="A group's committed offsets",
        description="The next offset the group will consume, per topic and queue.",
        parameters=[GROUP, _TOPIC_FILTER],
        responses=responses({200: GroupOffsetsSerializer}, *READ),
    )
    def get(self, request: Request, group: str) -> Response:
        topic = self.query(TopicFilterSerializer).get("topic")
        self.broker.admin.get_group(group)
        if topic is not None:
            self.broker.admin.get_topic(topic)
        return Response(offsets_dict(group, self.broker.get_offsets(group, topic)))

    @extend_schema(
        summary="Commit offsets",
        description="Every entry is checked (topic exists, queue in range) before any is "
        "committed. Returns the group's offsets after the commit.",
        parameters=[GROUP],
        request=OffsetsSerializer,
        examples=[OFFSETS_EXAMPLE],
        responses=responses({200: GroupOffsetsSerializer}),
    )
    def put(self, request: Request, group: str) -> Response:
        entries = self.body(OffsetsSerializer)["offsets"]
        self.broker.admin.get_group(group)
        for topic in dict.fromkeys(entry["topic"] for entry in entries):  # as for a reset
            require(request, Operation.DESCRIBE, Resource.topic(topic))
        for index, entry in enumerate(entries):
            self.mq_field_aliases = {
                "topic": f"offsets[{index}].topic",
                "topic_name": f"offsets[{index}].topic",
                "queue_id": f"offsets[{index}].queue_id",
            }
            self.broker.admin.queue_status(entry["topic"], entry["queue_id"])
        self.mq_field_aliases = {}
        before = self.broker.get_offsets(group)
        for entry in entries:
            self.broker.commit_offset(group, entry["topic"], entry["queue_id"], entry["offset"])
        old = [{**e, "offset": before.get(e["topic"], {}).get(e["queue_id"])} for e in entries]
        audit.record(request, "group.offsets.commit", "group", group, old=old, new=entries)
        return Response(offsets_dict(group, self.broker.get_offsets(group)))


class GroupResetView(BrokerView):
    acl = {"POST": (ResourceType.GROUP, "group", Operation.READ)}

    @extend_schema(
        summary="Reset a group's offsets on a topic",
        description="To the earliest or latest message, to a time (the first message stored "
        "at or after it), or to explicit offsets. dry_run returns the plan only.",
        parameters=[GROUP],
        request=ResetSerializer,
        examples=[RESET_EXAMPLE],
        responses=responses({200: ResetResultSerializer}),
    )
    def post(self, request: Request, group: str) -> Response:
        data = self.body(ResetSerializer)
        self.broker.admin.get_group(group)
        # A reset is a commit (group READ, the acl above) on a topic the user may see.
        require(request, Operation.DESCRIBE, Resource.topic(data["topic"]))
        to = data["to"]
        offsets = data.get("offsets")
        plans = self.broker.admin.reset_offsets(
            group,
            data["topic"],
            to=to if to in ("earliest", "latest") else None,
            timestamp_ms=data.get("timestamp"),
            offsets={o["queue_id"]: o["offset"] for o in offsets} if offsets else None,
            dry_run=data["dry_run"],
        )
        body = {
            "group": group,
            "topic": data["topic"],
            "dry_run": data["dry_run"],
            "queues": [plan_dict(p) for p in plans],
        }
        if not data["dry_run"]:
            audit.record(
                request,
                "group.offsets.reset",
                "group",
                group,
                old=[
                    {"topic": p.topic, "queue_id": p.queue_id, "offset": p.old_offset}
                    for p in plans
                ],
                new={
                    "request": {k: v for k, v in data.items() if k != "dry_run"},
                    "offsets": [
                        {"topic": p.topic, "queue_id": p.queue_id, "offset": p.new_offset}
                        for p in plans
                    ],
                },
            )
        return Response(body)
