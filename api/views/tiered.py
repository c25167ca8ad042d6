"""``/tiered``: tiered storage upload progress per queue (spec 10), with totals."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.views.base import BrokerView
from api.views.schema import responses
from cairn import runtime
from shared.serializers.common import TopicNameField
from shared.serializers.tiered import TieredStatusSerializer, tiered_status


class TieredQuerySerializer(serializers.Serializer):
    topic = TopicNameField(required=False, help_text="only this topic")


class TieredStatusView(BrokerView):
    @extend_schema(
        summary="Tiered storage progress",
        description="Per tiered queue: the first offset the tier holds, the dispatch offset "
        "(copied to the tier), the commit offset (durably uploaded; cold reads are served "
        "below it), the local max offset, the lag (messages not uploaded yet) and the bytes "
        "the queue takes in the tier; with totals, the backend and the read strategy. "
        '`{"enabled": false, "queues": []}` when tiered storage is off. '
        "Filter with ?topic=<name>.",
        parameters=[TieredQuerySerializer],
        responses=responses({200: TieredStatusSerializer}, 400, 401, 403, 503),
    )
    def get(self, request: Request) -> Response:
        q = self.query(TieredQuerySerializer)
        self.broker  # noqa: B018  # 503 while this process runs no broker
        return Response(tiered_status(runtime.current(), q.get("topic")))
