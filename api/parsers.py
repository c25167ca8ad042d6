"""Request body parsers with a size limit (413 before anything is parsed).

DRF hands parsers the raw request stream, so Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` never
applies to JSON bodies; the limit is checked here instead, against ``Content-Length`` and
again against what is actually read.
"""

from __future__ import annotations

import json
from typing import IO, Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from api.exceptions import RequestTooLarge


def max_request_bytes() -> int:
    return int(settings.CAIRN_API["MAX_REQUEST_BYTES"])


def read_limited(stream: IO[bytes], context: dict[str, Any] | None) -> bytes:
    """The whole body, or :class:`RequestTooLarge` if it is over the limit."""
    limit = max_request_bytes()
    request = (context or {}).get("request")
    if request is not None:
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > limit:
            raise RequestTooLarge(f"the request body is {declared} bytes; the limit is {limit}")
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise RequestTooLarge(f"the request body is over the limit of {limit} bytes")
    return data


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(f"the request body is not UTF-8: {exc}") from None


class LimitedJSONParser(BaseParser):
    """``application/json``, at most ``MAX_REQUEST_BYTES``; NaN and Infinity are refused."""

    media_type = "application/json"

    def parse(
        self, stream: IO[bytes], media_type: str | None = None, parser_context: Any = None
    ) -> Any:
        text = _decode(read_limited(stream, parser_context))
        try:
            return json.loads(text, parse_constant=_refuse_constant)
        except ValueError as exc:
            raise ParseError(f"malformed JSON: {exc}") from None
        except RecursionError:
            raise ParseError("malformed JSON: nested too deeply") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class RawDocumentParser(BaseParser):
    """A config document as text, unparsed: RocketMQ's files are not always valid JSON
    (``consumerOffset.json`` has bare integer keys), so the manager parses them itself."""

    media_type = "*/*"

    def parse(
        self, stream: IO[bytes], media_type: str | None = None, parser_context: Any = None
    ) -> str:
        return _decode(read_limited(stream, parser_context))
