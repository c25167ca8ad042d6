"""api.negotiation: the same renderer and media type as DRF's negotiation, or its error."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import RequestFactory
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import (
    BaseRenderer,
    BrowsableAPIRenderer,
    JSONRenderer,
    StaticHTMLRenderer,
)
from rest_framework.request import Request

from api.negotiation import QuickContentNegotiation


class AnyRenderer(BaseRenderer):
    media_type = "*/*"
    format = "any"


class TextRenderer(BaseRenderer):
    media_type = "text/plain; charset=utf-8"
    format = "txt"


RENDERER_LISTS = [
    [JSONRenderer()],
    [JSONRenderer(), BrowsableAPIRenderer()],
    [StaticHTMLRenderer(), JSONRenderer()],
    [TextRenderer(), JSONRenderer()],
    [AnyRenderer()],
]
ACCEPTS = [
    None,
    "*/*",
    "",
    "application/json",
    "application/json; indent=4",
    "text/html",
    "text/*",
    "*/*; q=0.5, text/html",
    "image/png",
]


def outcome(negotiation: Any, accept: str | None, renderers: list[Any], suffix: str | None) -> Any:
    extra = {} if accept is None else {"HTTP_ACCEPT": accept}
    request = Request(RequestFactory().get("/x", **extra))
    try:
        renderer, media_type = negotiation.select_renderer(request, renderers, suffix)
    except Exception as exc:  # NotAcceptable; Http404 for a suffix no renderer has
        return type(exc)
    return renderers.index(renderer), media_type


@pytest.mark.parametrize("accept", ACCEPTS)
@pytest.mark.parametrize("renderers", RENDERER_LISTS, ids=lambda r: "+".join(x.format for x in r))
@pytest.mark.parametrize("suffix", [None, "json", "txt"])
def test_same_answer_as_drf(accept: str | None, renderers: list[Any], suffix: str | None) -> None:
    assert outcome(QuickContentNegotiation(), accept, renderers, suffix) == outcome(
        DefaultContentNegotiation(), accept, renderers, suffix
    )


def test_the_usual_request_does_not_parse_the_accept_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def parse(*args: Any) -> Any:
        raise AssertionError("the Accept header was parsed")

    monkeypatch.setattr(DefaultContentNegotiation, "get_accept_list", parse)
    assert outcome(QuickContentNegotiation(), None, [JSONRenderer()], None) == (
        0,
        "application/json",
    )
    # Any other request goes the way of DRF (which parses it).
    outcome_ = outcome(QuickContentNegotiation(), "application/json", [JSONRenderer()], None)
    assert outcome_ is AssertionError
