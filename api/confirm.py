"""The REST API's confirmation rule for destructive changes (see README "Confirming
destructive changes").

A change that would lose or strand messages (:mod:`shared.impact`: ``at_risk``) answers
``409 application/problem+json`` with type ``urn:cairn:problem:confirmation-required``, field
``confirm``, rule ``required``, and the measured ``impact``; nothing changes. The client
repeats the request with ``?confirm=true`` to go ahead. A change that loses nothing (deleting
an empty topic) needs no confirmation, so clients written before the rule keep working.
``?dry_run=true`` answers the impact (or a config document's diff) and changes nothing.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.response import Response

# DRF's settings import api.parsers, which imports api.exceptions: load DRF's views (and so
# its settings) first, or a module importing this one first would find api.exceptions half
# initialised.
from rest_framework.views import APIView  # noqa: F401

from api.exceptions import PROBLEM_CONTENT_TYPE, problem
from shared.serializers.common import ProblemSerializer


class ConfirmQuerySerializer(serializers.Serializer):
    confirm = serializers.BooleanField(
        default=False,
        help_text="true: go ahead although messages would be lost or stranded (the 409's "
        "`impact` says which); not needed when nothing would be",
    )


class ChangeQuerySerializer(ConfirmQuerySerializer):
    dry_run = serializers.BooleanField(
        default=False, help_text="true: answer what the change would do; change nothing"
    )


class ImpactProblemSerializer(ProblemSerializer):
    """The 409 of a change that needs ``?confirm=true``."""

    impact = serializers.DictField(
        help_text="messages per queue lost or stranded, groups with lag (as in a dry run)"
    )


class ImpactResultSerializer(serializers.Serializer):
    """A dry run's answer: what the change would do."""

    dry_run = serializers.BooleanField()
    impact = serializers.DictField()


CONFIRM_PARAMETERS = [ConfirmQuerySerializer]
CHANGE_PARAMETERS = [ChangeQuerySerializer]

#: ``responses`` entry of the operations that may answer 409 for a confirmation.
NEEDS_CONFIRMATION = {
    (409, PROBLEM_CONTENT_TYPE): OpenApiResponse(
        ImpactProblemSerializer,
        description="messages would be lost or stranded: nothing changed; `impact` says "
        "what, repeat with ?confirm=true to go ahead",
    )
}

__all__ = [
    "CHANGE_PARAMETERS",
    "CONFIRM_PARAMETERS",
    "NEEDS_CONFIRMATION",
    "ChangeQuerySerializer",
    "ConfirmQuerySerializer",
    "ImpactResultSerializer",
    "confirmation_required",
]


def confirmation_required(impact: dict[str, Any]) -> Response:
    """The 409 for ``impact`` (an :mod:`shared.impact` answer with ``at_risk`` set)."""
    detail = f"{impact['summary']} Repeat with ?confirm=true to go ahead."
    errors = [{"field": "confirm", "rule": "required", "detail": detail}]
    response = problem(409, "confirmation-required", "Confirmation required", detail, errors)
    assert isinstance(response.data, dict)
    response.data["impact"] = impact
    return response
