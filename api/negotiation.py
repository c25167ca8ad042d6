"""Content negotiation with a short way for the usual request, which names no media type.

DRF's ``DefaultContentNegotiation`` parses the ``Accept`` header (``*/*`` when there is none)
into media type objects and matches them against every renderer, on every request, though
the API renders JSON only: ~40 us of a ~1 ms single send. For a request without ``Accept``
(or with exactly ``*/*``) and without a format override, DRF's answer is always the first
renderer with its own media type, whenever that type is concrete and carries no
parameters; :class:`QuickContentNegotiation` gives that answer directly and leaves
everything else to DRF (``tests/api/test_negotiation.py`` compares the two).
"""

from __future__ import annotations

from typing import Any

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer


class QuickContentNegotiation(DefaultContentNegotiation):
    def select_renderer(
        self, request: Any, renderers: list[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        if (
            renderers
            and not format_suffix
            and not self.settings.URL_FORMAT_OVERRIDE
            and request.META.get("HTTP_ACCEPT", "*/*") == "*/*"
        ):
            media_type = renderers[0].media_type
            if "*" not in media_type and ";" not in media_type:
                return renderers[0], media_type
        renderer: BaseRenderer
        renderer, accepted = super().select_renderer(request, renderers, format_suffix)
        return renderer, accepted
