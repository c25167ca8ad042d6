"""Encode and decode Kafka messages: bodies, headers and whole frames, using ``schemas``.

Headers (kafka-protocol.md section 1.2)::

    request v1  = api_key int16, api_version int16, correlation_id int32,
                  client_id nullable string (int16 length even in v2)
    request v2  = v1 + tagged-field section               (flexible request versions)
    response v0 = correlation_id int32                    (non-flexible, and ApiVersions)
    response v1 = v0 + tagged-field section               (flexible, except ApiVersions)

A frame is ``int32 size`` + header + body. Bodies are ``dict[str, Any]`` (``structs.py``).
Errors: anything wrong in received bytes raises ``RemoteProtocolError`` (error_code
INVALID_REQUEST, or UNSUPPORTED_VERSION for a version no schema covers); a value that
cannot be encoded raises ``LocalProtocolError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from mqcore.errors import LocalProtocolError, RemoteProtocolError

from .errors import ErrorCode
from .primitives import INT32, Reader, Writer
from .schemas import schema_for
from .structs import Decoder, Encoder


def _checked_codec(api_key: int, version: int, response: bool) -> tuple[Decoder, Encoder]:
    schema = schema_for(api_key)
    if not schema.min_version <= version <= schema.max_version:
        raise RemoteProtocolError(
            f"{schema.name} v{version} outside v{schema.min_version}-v{schema.max_version}",
            ErrorCode.UNSUPPORTED_VERSION,
        )
    return schema.codec(version, response)


def _decode(decoder: Decoder, data: bytes | memoryview | Reader, strict: bool) -> Any:
    reader = data if isinstance(data, Reader) else Reader(data)
    value = decoder(reader)
    if strict and reader.remaining():
        raise RemoteProtocolError(
            f"{reader.remaining()} trailing bytes after the message body",
            ErrorCode.INVALID_REQUEST,
        )
    return value


def _encode(encoder: Encoder, value: Mapping[str, Any]) -> bytes:
    writer = Writer()
    try:
        encoder(writer, value)
    except (TypeError, AttributeError, ValueError, OverflowError) as exc:
        if isinstance(exc, LocalProtocolError):
            raise
        raise LocalProtocolError(f"cannot encode {value!r:.200}: {exc}") from exc
    return writer.getvalue()


def decode_request(
    api_key: int, version: int, body: bytes | memoryview | Reader, *, strict: bool = True
) -> dict[str, Any]:
    """Decode a request body (the bytes after the request header).

    Args:
        api_key: the API of the request.
        version: its version.
        body: the body bytes, or a reader positioned at the body.
        strict: reject bytes left over after the last field.

    Returns:
        The request as a dict (see ``structs.py`` for the value types).

    Raises:
        RemoteProtocolError: unknown key or version, truncated or malformed body.
    """
    result: dict[str, Any] = _decode(_checked_codec(api_key, version, False)[0], body, strict)
    return result


def decode_response(
    api_key: int, version: int, body: bytes | memoryview | Reader, *, strict: bool = True
) -> dict[str, Any]:
    """Decode a response body (client side and tests); same contract as decode_request."""
    result: dict[str, Any] = _decode(_checked_codec(api_key, version, True)[0], body, strict)
    return result


def encode_request(api_key: int, version: int, request: Mapping[str, Any]) -> bytes:
    """Encode a request body (client side and tests).

    Raises:
        LocalProtocolError: a value does not fit its field.
        RemoteProtocolError: unknown key or version.
    """
    return _encode(_checked_codec(api_key, version, False)[1], request)


def encode_response(api_key: int, version: int, response: Mapping[str, Any]) -> bytes:
    """Encode a response body (without header or size prefix).

    Raises:
        LocalProtocolError: a value does not fit its field.
        RemoteProtocolError: unknown key or version.
    """
    return _encode(_checked_codec(api_key, version, True)[1], response)


class RequestHeader(NamedTuple):
    """The decoded request header (v1 or v2; v0 is never sent by our clients)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def decode_request_header(reader: Reader) -> RequestHeader:
    """Read a request header, choosing v1 or v2 from the API's flexible versions.

    The first 8 bytes are the same in every header version, so the key and version are
    read before the rest is interpreted.

    Raises:
        RemoteProtocolError: truncated header or unknown API key.
    """
    api_key = reader.int16()
    api_version = reader.int16()
    correlation_id = reader.int32()
    schema = schema_for(api_key)
    client_id = reader.nullable_string()
    if schema.is_flexible(api_version):
        reader.tagged_fields()
    return RequestHeader(api_key, api_version, correlation_id, client_id)


def encode_request_header(header: RequestHeader) -> bytes:
    """Encode a request header (v2 when the request version is flexible, else v1)."""
    w = Writer()
    w.int16(header.api_key)
    w.int16(header.api_version)
    w.int32(header.correlation_id)
    w.nullable_string(header.client_id)
    if schema_for(header.api_key).is_flexible(header.api_version):
        w.tagged_fields()
    return w.getvalue()


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    """Encode a response header v0 (correlation id) or v1 (plus an empty tagged section)."""
    return INT32.pack(correlation_id) + (b"\x00" if header_version >= 1 else b"")


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return INT32.pack(len(payload)) + payload


def encode_request_frame(
    api_key: int,
    version: int,
    correlation_id: int,
    request: Mapping[str, Any],
    client_id: str | None = "cairn-test",
) -> bytes:
    """A complete size-prefixed request, as a client would send it (tests, probes)."""
    header = encode_request_header(RequestHeader(api_key, version, correlation_id, client_id))
    return frame(header + encode_request(api_key, version, request))


def decode_response_frame(
    api_key: int, version: int, data: bytes | memoryview
) -> tuple[int, dict[str, Any]]:
    """Decode a complete size-prefixed response; returns ``(correlation_id, body)``.

    Raises:
        RemoteProtocolError: the size prefix disagrees with the data, or the body is
            malformed.
    """
    reader = Reader(data)
    size = reader.int32()
    if size != reader.remaining():
        raise RemoteProtocolError(f"frame size {size} but {reader.remaining()} bytes follow")
    correlation_id = reader.int32()
    if schema_for(api_key).response_header_version(version) >= 1:
        reader.tagged_fields()
    return correlation_id, decode_response(api_key, version, reader)
