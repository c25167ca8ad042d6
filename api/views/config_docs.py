"""``/config/{topics,subscriptionGroup,consumerOffset}.json``: RocketMQ's own documents.

GET answers the document exactly as RocketMQ writes the file (fastjson pretty format, TABs,
sorted bean keys; ``consumerOffset.json`` has bare integer keys, which strict JSON parsers
refuse: ``?format=json`` gives the same content as standard JSON). PUT takes a document in
the same format (RocketMQ's file, strict JSON, 4.x legacy shapes), checks all of it, and
replaces the whole table at once, or changes nothing and answers 400 naming the first
broken rule's JSON path (``topicConfigTable.TopicA.perm``).
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import audit
from api.confirm import NEEDS_CONFIRMATION, ChangeQuerySerializer, confirmation_required
from api.parsers import RawDocumentParser
from api.permissions import require
from api.views.base import BrokerView
from api.views.schema import READ, responses
from mqcore.access.model import Operation, Resource
from mqcore.errors import ValidationError as MQValidationError
from mqcore.metadata.config_file import ConfigFileManager
from mqcore.metadata.jsonfile import loads_fastjson
from shared import impact
from shared.serializers.admin import ConfigImportResultSerializer

DOCUMENTS = ("topics.json", "subscriptionGroup.json", "consumerOffset.json")


class FormatSerializer(serializers.Serializer):
    format = serializers.ChoiceField(["rocketmq", "json"], default="rocketmq")


def _parsed(text: str) -> Any:
    """The document as plain JSON data (bare integer keys become strings)."""
    return json.loads(json.dumps(loads_fastjson(text)))


class ConfigDocumentView(BrokerView):
    """One document; ``document`` is bound by the URL pattern. As in the console: export
    needs ``DESCRIBE`` on the cluster (the viewer role's), import ``ALTER`` on it (the admin
    role's; Kafka's operation for changing the cluster's configuration)."""

    acl_in_view = frozenset({"GET", "HEAD", "PUT"})
    parser_classes = [RawDocumentParser]
    document = ""

    def manager(self) -> ConfigFileManager[Any]:
        metadata = self.broker.metadata
        return {
            "topics.json": metadata.topics,
            "subscriptionGroup.json": metadata.groups,
            "consumerOffset.json": metadata.offsets,
        }[self.document]

    @extend_schema(
        summary="Export a RocketMQ config document",
        parameters=[FormatSerializer],
        responses=responses(
            {
                200: OpenApiResponse(
                    OpenApiTypes.OBJECT,
                    description="the document (rocketmq: fastjson text as the broker's file)",
                )
            },
            *READ,
        ),
    )
    def get(self, request: Request) -> Any:
        require(request, Operation.DESCRIBE, Resource.cluster())
        fmt = self.query(FormatSerializer)["format"]
        text = self.manager().to_document()
        if fmt == "json":
            return Response(_parsed(text))
        response = HttpResponse(
            text.encode("utf-8"), content_type="application/json; charset=utf-8"
        )
        response["Content-Disposition"] = f'inline; filename="{self.document}"'
        return response

    @extend_schema(
        summary="Import a RocketMQ config document (admin)",
        description="Replaces the whole table. The document is checked in full first; if "
        "anything in it is wrong nothing changes (400 with the JSON path in `field`). The "
        "answer has the `diff`: entries added, removed and changed (field by field), and the "
        "`impact` of the removed and changed ones (a removed topic's messages per queue and "
        "its groups with lag; a topic whose read queues shrink, the messages of the cut "
        "queues; a removed group's lag). `?dry_run=true` answers the same diff and changes "
        "nothing. An import that would lose or strand messages (`diff.at_risk`) answers 409 "
        "with the diff as `impact` and changes nothing, unless `?confirm=true`.",
        parameters=[ChangeQuerySerializer],
        request={"application/json": OpenApiTypes.OBJECT, "text/plain": OpenApiTypes.STR},
        responses={**responses({200: ConfigImportResultSerializer}), **NEEDS_CONFIRMATION},
    )
    def put(self, request: Request) -> Response:
        require(request, Operation.ALTER, Resource.cluster())
        flags = self.query(ChangeQuerySerializer)
        text = request.data if isinstance(request.data, str) else ""
        if not text.strip():
            raise MQValidationError("body", "empty", f"body: send the {self.document} document")
        manager = self.manager()
        old_text = manager.to_document()
        try:
            preview = manager.preview_document(text)
        except RecursionError:
            raise MQValidationError(
                "document", "json", "the document is nested too deeply"
            ) from None
        diff = impact.config_diff(self.broker, self.document, old_text, preview)
        version = getattr(manager, "data_version", None)
        if flags["dry_run"]:
            return Response(
                {
                    "document": self.document,
                    "applied": False,
                    "dry_run": True,
                    "data_version": version.to_json() if version is not None else {},
                    "diff": diff,
                }
            )
        if diff["at_risk"] and not flags["confirm"]:
            return confirmation_required(diff)
        manager.replace_from_document(text)
        new_text = manager.to_document()
        audit.record(
            request,
            "config.import",
            "config",
            self.document,
            old=_parsed(old_text),
            new=_parsed(new_text) | {"diff": _audited(diff)},
        )
        version = getattr(manager, "data_version", None)
        return Response(
            {
                "document": self.document,
                "applied": True,
                "dry_run": False,
                "data_version": version.to_json() if version is not None else {},
                "diff": diff,
            }
        )


def _audited(diff: dict[str, Any]) -> dict[str, Any]:
    """The diff as the audit entry keeps it: the names and the impact (the documents before
    and after are in the entry already)."""
    return {k: diff[k] for k in ("added", "removed", "changed", "impact", "summary")}
