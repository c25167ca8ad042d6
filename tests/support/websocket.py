"""A small blocking WebSocket client (RFC 6455) for tests against a real broker, over plain
TCP or TLS, that can send what a browser would (any ``Origin``, a cookie) and what an attacker
would (huge or deeply nested frames), and reports close codes and refused handshakes as they
are. The standard library only."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import struct
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


class HandshakeRefused(Exception):
    def __init__(self, status: int, head: str) -> None:
        super().__init__(f"handshake refused: HTTP {status}")
        self.status = status
        self.head = head


class Closed(Exception):
    """The server closed the connection (``code`` from its close frame, None without one)."""

    def __init__(self, code: int | None, reason: str = "") -> None:
        super().__init__(f"closed by the server: {code} {reason}".strip())
        self.code = code
        self.reason = reason


@dataclass
class WebSocket:
    sock: socket.socket
    buffer: bytes = b""

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        origin: str | None = None,
        cookie: str | None = None,
        context: ssl.SSLContext | None = None,
        timeout: float = 10,
    ) -> WebSocket:
        """Open ``ws://`` or ``wss://`` ``url``. Raises :class:`HandshakeRefused` unless the
        server answers 101."""
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "wss" else 80)
        raw = socket.create_connection((host, port), timeout=timeout)
        sock: socket.socket = raw
        if parts.scheme == "wss":
            sock = (context or ssl.create_default_context()).wrap_socket(raw, server_hostname=host)
        key = base64.b64encode(os.urandom(16)).decode()
        host_header = f"[{host}]" if ":" in host else host
        lines = [
            f"GET {parts.path or '/'}{'?' + parts.query if parts.query else ''} HTTP/1.1",
            f"Host: {host_header}:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
        ]
        if origin is not None:
            lines.append(f"Origin: {origin}")
        if cookie is not None:
            lines.append(f"Cookie: {cookie}")
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        ws = cls(sock)
        head = ws._read_until(b"\r\n\r\n").decode("latin-1")
        status = int(head.split(" ", 2)[1])
        if status != 101:
            sock.close()
            raise HandshakeRefused(status, head)
        return ws

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise Closed(None, "connection closed during the handshake")
            self.buffer += chunk
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    def _read_exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buffer)))
            if not chunk:
                raise Closed(None, "connection closed without a close frame")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        repeated = (mask * (n // 4 + 1))[:n]
        masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(
            n, "big"
        )
        self.sock.sendall(head + mask + masked)

    def send_text(self, text: str) -> None:
        self._send_frame(OP_TEXT, text.encode())

    def send_json(self, value: Any) -> None:
        self.send_text(json.dumps(value))

    def recv_text(self, timeout: float = 10) -> str:
        """The next text message (pings answered). Raises :class:`Closed` on a close."""
        self.sock.settimeout(timeout)
        message = b""
        while True:
            first, second = self._read_exact(2)
            opcode, fin = first & 0x0F, bool(first & 0x80)
            n = second & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", self._read_exact(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", self._read_exact(8))
            payload = self._read_exact(n)
            if opcode == OP_PING:
                self._send_frame(OP_PONG, payload)
            elif opcode == OP_CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                raise Closed(code, payload[2:].decode(errors="replace"))
            elif opcode in (OP_TEXT, OP_CONTINUATION):
                message += payload
                if fin:
                    return message.decode()

    def recv_json(self, timeout: float = 10) -> dict[str, Any]:
        frame: dict[str, Any] = json.loads(self.recv_text(timeout))
        return frame

    def until(self, timeout: float = 10, **wanted: Any) -> dict[str, Any]:
        """Frames up to the first whose fields equal ``wanted``; that frame."""
        while True:
            frame = self.recv_json(timeout)
            if all(frame.get(k) == v for k, v in wanted.items()):
                return frame

    def close(self) -> None:
        try:
            self._send_frame(OP_CLOSE, struct.pack("!H", 1000))
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> WebSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
