"""``KafkaServerConnection``: the broker side of one Kafka connection, sans I/O (h11/h2 style).

It never touches a socket or a clock. The server feeds it received bytes and gets events
back; it hands it response dicts and gets bytes to write::

    conn = KafkaServerConnection()
    for event in conn.receive_data(chunk):        # b"" = EOF
        if isinstance(event, RequestReceived):
            if event.expects_response:
                conn.send_response(event.correlation_id, handle(event))
            else:                                  # Produce with acks=0
                conn.no_response(event.correlation_id)
        elif isinstance(event, ConnectionClosed):
            ...
    writer.write(conn.data_to_send())

Rules it enforces (kafka-protocol.md sections 1 and 2.3):

* **Responses leave in request order.** Every accepted request takes a slot in a FIFO;
  ``send_response`` fills the slot and ``data_to_send`` releases filled slots from the
  head only. Clients match the next response to the oldest in-flight request, so a
  response produced early waits for its predecessors.
* **Produce with acks=0 gets no response at all** (a reply would be read as the answer
  to the next request). Its event says ``expects_response=False``; the handler calls
  ``no_response`` to free the slot, and ``send_response`` for it is refused.
* **ApiVersions above the supported range** (kafka-python probes with v4, librdkafka
  with v3) is answered here, without parsing the body: a v0-layout body with
  UNSUPPORTED_VERSION (35) and the full supported table, response header v0. No event
  is emitted; the reply takes its place in the response order like any other.
* **Any other unsupported version, or an unknown API key**: Kafka cannot form a reply, so
  it closes the connection. That includes Produce v0-2, which ApiVersions advertises (for
  old librdkafka's compression check) but Kafka 4 refuses the same way. Here that is a :class:`~mqcore.errors.RemoteProtocolError`
  (the server logs it and closes), as is every malformed frame, header or body.
* After a ``RemoteProtocolError`` the connection is dead: every later call raises again.
* **SASL tokens without Kafka headers.** After a SaslHandshake **v0** the client sends its
  SASL tokens as bare size-prefixed frames (no API key, no correlation id) and expects
  the server's tokens the same way. The connection switches to that mode as soon as it
  decodes a v0 handshake (a client that sends its first token right behind the handshake
  is still read right), emits :class:`SaslTokenReceived` per frame, and queues the
  answer with :meth:`KafkaServerConnection.send_token`; the server calls
  :meth:`~KafkaServerConnection.end_tokens` once the exchange is over (``sasl.py``
  decides when). One token is in flight at a time: the client waits for each answer.

Thread-safety: none; one connection object per socket, used from one task.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mqcore.errors import LocalProtocolError, RemoteProtocolError

from .errors import ErrorCode
from .framing import DEFAULT_MAX_FRAME_BYTES, FrameBuffer
from .messages import (
    decode_request,
    decode_request_header,
    encode_response,
    encode_response_header,
)
from .primitives import INT32, Reader
from .schemas import API_VERSIONS_TABLE, SCHEMAS, ApiKey, advertised_versions


@dataclass(frozen=True, slots=True)
class RequestReceived:
    """A complete, decoded request.

    ``request`` is the body as a dict (``schemas.py``). ``expects_response`` is False
    only for Produce with ``acks == 0``. ``frame_bytes`` is the size of the frame it was
    decoded from (what the server counts as held until it has handled the request).
    """

    correlation_id: int
    api_key: int
    api_version: int
    client_id: str | None
    request: dict[str, Any]
    expects_response: bool = True
    frame_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer closed its side (``receive_data(b"")``). ``buffered_bytes`` counts bytes
    of an incomplete frame that were discarded."""

    buffered_bytes: int = 0


@dataclass(frozen=True, slots=True)
class SaslTokenReceived:
    """A bare SASL token (the frames after a SaslHandshake v0, module docstring)."""

    token: bytes
    frame_bytes: int = 0


Event = RequestReceived | SaslTokenReceived | ConnectionClosed


class _Slot:
    """One in-flight request's place in the response order."""

    __slots__ = ("correlation_id", "api_key", "api_version", "expects_response", "payload")

    def __init__(self, correlation_id: int | None, api_key: int, api_version: int, expects: bool):
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.expects_response = expects
        self.payload: bytes | None = None  # framed response, or b"" for "send nothing"


class KafkaServerConnection:
    """State machine for the server side of one Kafka connection (see module docstring)."""

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        supported: Mapping[int, tuple[int, int]] = API_VERSIONS_TABLE,
    ) -> None:
        """
        Args:
            max_frame_bytes: largest accepted request frame (without its 4-byte size).
            supported: ``api_key -> (min_version, max_version)`` to accept and advertise.

        Raises:
            ValueError: ``supported`` names an API or version no schema covers.
        """
        for key, (lo, hi) in supported.items():
            schema = SCHEMAS.get(key)
            if schema is None or lo > hi or lo < schema.min_version or hi > schema.max_version:
                raise ValueError(f"no schema covers API {key} v{lo}-v{hi}")
        self.supported: dict[int, tuple[int, int]] = dict(supported)
        self._frames = FrameBuffer(max_frame_bytes)
        self._slots: deque[_Slot] = deque()
        # A bare SASL token's slot is keyed None (it has no correlation id).
        self._by_id: dict[int | None, _Slot] = {}
        self._bare_tokens = False  # after a SaslHandshake v0, until end_tokens()
        self._outgoing = bytearray()
        self._closed = False
        self._error: RemoteProtocolError | None = None

    # -- receiving ---------------------------------------------------------------------

    @property
    def buffered_bytes(self) -> int:
        """Bytes received that do not form a complete frame yet."""
        return self._frames.buffered_bytes

    @property
    def in_flight(self) -> int:
        """Requests accepted whose response has not been released by data_to_send."""
        return len(self._slots)

    def receive_data(self, data: bytes) -> list[Event]:
        """Feed received bytes; return the events they complete, in order.

        Args:
            data: bytes from the socket; ``b""`` means the peer closed (EOF).

        Returns:
            ``RequestReceived`` per complete request (ApiVersions probes above the table
            are answered internally and produce none), then ``ConnectionClosed`` on EOF.

        Raises:
            RemoteProtocolError: oversized or negative frame size, malformed header or
                body, unknown API key, unsupported version (other than ApiVersions),
                duplicate in-flight correlation id. The connection is dead afterwards.
            LocalProtocolError: data after EOF was already reported.
        """
        if self._error is not None:
            raise self._error
        if self._closed:
            if data:
                raise LocalProtocolError("receive_data after EOF")
            return []
        if not data:
            self._closed = True
            return [ConnectionClosed(self._frames.buffered_bytes)]
        events: list[Event] = []
        try:
            self._frames.feed(data)
            for payload in self._frames:
                event = self._handle_frame(payload)
                if event is not None:
                    events.append(event)
        except RemoteProtocolError as exc:
            self._error = exc
            raise
        return events

    def _handle_frame(self, payload: bytes) -> RequestReceived | SaslTokenReceived | None:
        if self._bare_tokens:
            if None in self._by_id:
                raise RemoteProtocolError(
                    "a SASL token was sent before the previous one was answered",
                    ErrorCode.ILLEGAL_SASL_STATE,
                )
            self._push_slot(_Slot(None, ApiKey.SASL_AUTHENTICATE, 0, True))
            return SaslTokenReceived(payload, len(payload))
        reader = Reader(payload)
        if reader.remaining() < 8:
            raise RemoteProtocolError(
                f"request frame of {len(payload)} bytes is shorter than a header",
                ErrorCode.INVALID_REQUEST,
            )
        api_key = reader.int16()
        api_version = reader.int16()
        correlation_id = reader.int32()
        if correlation_id in self._by_id:
            raise RemoteProtocolError(
                f"correlation id {correlation_id} is already in flight", ErrorCode.INVALID_REQUEST
            )
        bounds = self.supported.get(api_key)
        if bounds is None:
            raise RemoteProtocolError(
                f"unsupported API key {api_key} (v{api_version})", ErrorCode.INVALID_REQUEST
            )
        if not bounds[0] <= api_version <= bounds[1]:
            if api_key == ApiKey.API_VERSIONS and api_version > bounds[1]:
                self._answer_unsupported_api_versions(correlation_id, api_version)
                return None
            # Produce v0-2 lands here too: advertised, refused (schemas.ADVERTISED_MIN_VERSIONS).
            raise RemoteProtocolError(
                f"{SCHEMAS[api_key].name} v{api_version} outside v{bounds[0]}-v{bounds[1]}",
                ErrorCode.UNSUPPORTED_VERSION,
            )
        reader.pos = 0
        header = decode_request_header(reader)
        request = decode_request(api_key, api_version, reader)
        expects = not (api_key == ApiKey.PRODUCE and request["acks"] == 0)
        if api_key == ApiKey.SASL_HANDSHAKE and api_version == 0:
            self._bare_tokens = True  # the next frames are bare tokens (module docstring)
        self._push_slot(_Slot(correlation_id, api_key, api_version, expects))
        return RequestReceived(
            correlation_id, api_key, api_version, header.client_id, request, expects, len(payload)
        )

    def _push_slot(self, slot: _Slot) -> None:
        self._slots.append(slot)
        self._by_id[slot.correlation_id] = slot

    def _answer_unsupported_api_versions(self, correlation_id: int, api_version: int) -> None:
        # KIP-511: reply in the v0 layout with header v0, error 35 and our whole table,
        # whatever the requested version; the client then retries with our maximum.
        slot = _Slot(correlation_id, ApiKey.API_VERSIONS, 0, True)
        self._push_slot(slot)
        reply = self.api_versions_response(ErrorCode.UNSUPPORTED_VERSION)
        body = encode_response(ApiKey.API_VERSIONS, 0, reply)
        self._fill(slot, encode_response_header(correlation_id, 0) + body)

    def api_versions_response(self, error_code: int = ErrorCode.NONE) -> dict[str, Any]:
        """The ApiVersions response body advertising ``supported`` (for any version)."""
        return {
            "error_code": int(error_code),
            "api_keys": [
                {"api_key": int(key), "min_version": lo, "max_version": hi}
                for key, (lo, hi) in sorted(advertised_versions(self.supported).items())
            ],
            "throttle_time_ms": 0,
        }

    # -- sending -----------------------------------------------------------------------

    def _slot(self, correlation_id: int) -> _Slot:
        slot = self._by_id.get(correlation_id)
        if slot is None or slot.payload is not None:
            raise LocalProtocolError(f"no pending request with correlation id {correlation_id}")
        return slot

    def _fill(self, slot: _Slot, message: bytes) -> None:
        slot.payload = INT32.pack(len(message)) + message if message else b""
        self._release()

    def send_response(self, correlation_id: int, response: Mapping[str, Any]) -> None:
        """Encode the response to a pending request and queue it in request order.

        Args:
            correlation_id: the request's correlation id.
            response: the response body for the request's API and version.

        Raises:
            LocalProtocolError: no such pending request, it expects no response
                (acks=0 Produce), or a field does not fit its type.
        """
        slot = self._slot(correlation_id)
        if not slot.expects_response:
            raise LocalProtocolError(
                f"request {correlation_id} is a Produce with acks=0: call no_response"
            )
        schema = SCHEMAS[slot.api_key]
        body = encode_response(slot.api_key, slot.api_version, response)
        header = encode_response_header(
            correlation_id, schema.response_header_version(slot.api_version)
        )
        self._fill(slot, header + body)

    def send_token(self, token: bytes) -> None:
        """Queue the answer to the pending bare SASL token: ``token`` size-prefixed, no
        header (an empty token is sent as a zero size, as Kafka does for PLAIN).

        Raises:
            LocalProtocolError: no bare token is pending.
        """
        slot = self._by_id.get(None)
        if slot is None or slot.payload is not None:
            raise LocalProtocolError("no pending SASL token")
        slot.payload = INT32.pack(len(token)) + token
        self._release()

    def end_tokens(self) -> None:
        """The bare-token exchange is over: the next frames are Kafka requests again."""
        self._bare_tokens = False

    @property
    def bare_tokens(self) -> bool:
        """Whether frames are read as bare SASL tokens now (after a SaslHandshake v0)."""
        return self._bare_tokens

    def no_response(self, correlation_id: int) -> None:
        """Free a pending request's slot without sending anything (acks=0 Produce).

        Raises:
            LocalProtocolError: no such pending request.
        """
        self._fill(self._slot(correlation_id), b"")

    def _release(self) -> None:
        slots = self._slots
        while slots and slots[0].payload is not None:
            slot = slots.popleft()
            del self._by_id[slot.correlation_id]
            self._outgoing += slot.payload or b""

    def data_to_send(self) -> bytes:
        """Return (and forget) every byte ready to be written, in request order."""
        data = bytes(self._outgoing)
        self._outgoing.clear()
        return data
