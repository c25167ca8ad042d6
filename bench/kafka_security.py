"""``bench/kafka.py --security``: Cairn's Kafka listener with SASL (and TLS), side by side
with plaintext in the same run, and the cost of authenticating a new connection.

* ``sasl_plaintext``: SCRAM-SHA-512 on a plain TCP port; ``sasl_ssl``: SCRAM-SHA-512 over
  TLS 1.2+ (a CA and server certificate made for the run, as the tests make them). The
  listener requires authentication (``CAIRN_KAFKA_AUTH=required``).
* The user's SCRAM credentials are derived once when the server starts (4,096 iterations,
  Kafka's minimum), as the accounts database stores them: a login costs the broker a
  look-up and a few HMACs, not a PBKDF2.
* **Authentication of a new connection**: a raw Python client opens a TCP connection,
  does the TLS handshake (``sasl_ssl``), SaslHandshake and the two SaslAuthenticate
  round trips of SCRAM-SHA-512, ``--auth-connections`` times one after the other;
  p50/p99 of connect → authenticated. The client's own PBKDF2 is computed once beforehand
  (a client may cache its salted password; the figure is the broker's and the wire's).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
import ssl
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

USER, PASSWORD, MECHANISM = "bench", "bench-password-123", "SCRAM-SHA-512"
CHOICES = ("plaintext", "sasl_plaintext", "sasl_ssl")


@dataclass
class Security:
    """One security setting: what the server is started with and what clients add."""

    name: str
    tls_dir: Path | None = None
    client: dict[str, Any] = field(default_factory=dict)

    @property
    def serve_args(self) -> list[str]:
        args = ["--security", self.name]
        return args + (["--tls-dir", str(self.tls_dir)] if self.tls_dir else [])


def prepare(name: str, workdir: Path) -> Security:
    """The certificates (``sasl_ssl``) and the client settings for ``name``."""
    if name == "plaintext":
        return Security(name)
    client = {
        "security.protocol": name,
        "sasl.mechanism": MECHANISM,
        "sasl.username": USER,
        "sasl.password": PASSWORD,
    }
    tls_dir = None
    if name == "sasl_ssl":
        from tests.support.certificates import TestCA

        tls_dir = workdir / "tls"
        ca = TestCA(tls_dir)
        ca.server("127.0.0.1", name="server")
        client["ssl.ca.location"] = str(ca.path)
    return Security(name, tls_dir, client)


def listener_options(name: str, tls_dir: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--serve`` side: (ListenerConfig fields, KafkaListener keyword arguments)."""
    if name == "plaintext":
        return {}, {}
    from mqcore.access.backend import StaticAccess
    from mqcore.access.scram import MIN_ITERATIONS, ScramUser, derive_user

    derived = {m: derive_user(m, [PASSWORD], iterations=MIN_ITERATIONS)
               for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}  # fmt: skip

    class StoredAccess(StaticAccess):
        """Credentials derived once, as the accounts database keeps them."""

        def scram_user(self, mechanism: str, username: str) -> ScramUser | None:
            return derived.get(mechanism) if username == USER else None

    kwargs: dict[str, Any] = {"access": StoredAccess(users={USER: ("operator", (PASSWORD,))})}
    if tls_dir is not None:
        from cairn import tls

        directory = Path(tls_dir)
        credentials = tls.load(directory / "server.pem", directory / "server.key")
        kwargs["ssl_context"] = tls.kafka_ssl_context(credentials)
    return {"auth": "required"}, kwargs


def _frame(sock: socket.socket, api_key: int, version: int, cid: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, cid, 5) + b"bench"
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    size = struct.unpack(">i", _exactly(sock, 4))[0]
    return _exactly(sock, size)[4:]  # without the correlation id


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data


def _authenticate(sock: socket.socket, token: bytes, cid: int) -> bytes:
    # SaslAuthenticate v1: auth_bytes; reply error_code, error_message, auth_bytes, lifetime.
    reply = _frame(sock, 36, 1, cid, struct.pack(">i", len(token)) + token)
    error, message_len = struct.unpack(">hh", reply[:4])
    if error:
        raise RuntimeError(f"SaslAuthenticate error {error}: {reply[4 : 4 + message_len]!r}")
    rest = reply[4 + max(message_len, 0) :]
    size = struct.unpack(">i", rest[:4])[0]
    return rest[4 : 4 + size]


def _salted_password(server_first: str) -> bytes:
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    return hashlib.pbkdf2_hmac("sha512", PASSWORD.encode(), base64.b64decode(attrs["s"]),
                               int(attrs["i"]))  # fmt: skip


def _login(host: str, port: int, context: ssl.SSLContext | None, salted: bytes | None) -> bytes:
    """One new connection, authenticated with SCRAM-SHA-512; returns the salted password
    (so the caller computes it once)."""
    raw = socket.create_connection((host, port), timeout=10)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock = context.wrap_socket(raw, server_hostname=host) if context else raw
    try:
        mechanism = MECHANISM.encode()
        reply = _frame(sock, 17, 1, 1, struct.pack(">h", len(mechanism)) + mechanism)
        if struct.unpack(">h", reply[:2])[0]:
            raise RuntimeError("SaslHandshake refused SCRAM-SHA-512")
        bare = f"n={USER},r={base64.b64encode(time.time_ns().to_bytes(12, 'big')).decode()}"
        server_first = _authenticate(sock, f"n,,{bare}".encode(), 2).decode()
        salted = salted or _salted_password(server_first)
        nonce = dict(p.split("=", 1) for p in server_first.split(","))["r"]
        without_proof = f"c=biws,r={nonce}"
        client_key = hmac.digest(salted, b"Client Key", "sha512")
        stored = hashlib.sha512(client_key).digest()
        auth = f"{bare},{server_first},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, hmac.digest(stored, auth, "sha512"),
                                            strict=True))  # fmt: skip
        final = f"{without_proof},p={base64.b64encode(proof).decode()}".encode()
        if not _authenticate(sock, final, 3).startswith(b"v="):
            raise RuntimeError("no server signature")
        return salted
    finally:
        sock.close()


def auth_latency(security: Security, bootstrap: str, count: int) -> list[float]:
    """Seconds from connect to authenticated, for ``count`` new connections in a row."""
    host, port = bootstrap.rsplit(":", 1)
    context = None
    if security.name == "sasl_ssl":
        context = ssl.create_default_context(cafile=security.client["ssl.ca.location"])
    salted = _login(host, int(port), context, None)  # warm-up; the client's PBKDF2 once
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        _login(host, int(port), context, salted)
        samples.append(time.perf_counter() - started)
    return samples
