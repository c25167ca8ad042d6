"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), the server side, sans-I/O.

Credentials (section 3): ``SaltedPassword = PBKDF2(HMAC-H, secret, salt, iterations)``,
``StoredKey = H(HMAC(SaltedPassword, "Client Key"))``, ``ServerKey = HMAC(SaltedPassword,
"Server Key")``. Only ``StoredKey`` and ``ServerKey`` are kept, never the secret. As Kafka's
``ScramFormatter`` does, the secret is its UTF-8 bytes (no SASLprep).

The exchange, as :class:`ScramExchange` runs it::

    client-first   n,,n=<user>,r=<client nonce>[,<extensions>]     -> parse_first()
    server-first   r=<client nonce><server nonce>,s=<salt b64>,i=<iterations>
    client-final   c=biws,r=<full nonce>,p=<proof b64>            -> finish()
    server-final   v=<server signature b64>                        (or raise ScramError)

``finish`` checks the channel binding (``biws`` = ``n,,``: none), that the nonce is the one
this exchange sent (a replayed client-final of another exchange fails), and the proof against
each of the user's secrets (a user's password and API tokens share its salt:
``ScramUser``). An unknown user gets a server-first made from a salt derived from the
name, so a client cannot tell unknown users from wrong passwords; its exchange always fails.

Errors are :class:`ScramError` with a message for the log; the client is told only that
authentication failed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

#: Mechanism name -> hash name (hashlib).
MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: RFC 7677 asks for at least 4096; Kafka refuses fewer.
MIN_ITERATIONS = 4096
DEFAULT_ITERATIONS = 8192
SALT_BYTES = 16
_NONCE_BYTES = 24
_GS2_NO_BINDING = "n,,"
_CHANNEL_BINDING = base64.b64encode(_GS2_NO_BINDING.encode()).decode()  # "biws"


@dataclass(frozen=True, slots=True)
class ScramSecret:
    """One SCRAM credential (RFC 5802 section 3): ``StoredKey`` and ``ServerKey`` derived from
    one secret (the password, or one API token) with the user's salt and iteration count."""

    stored_key: bytes
    server_key: bytes


@dataclass(frozen=True, slots=True)
class ScramUser:
    """A user's SCRAM credentials for one mechanism. Every secret of a user (the password and
    each API token) is derived with the same salt and iterations, so the server can send
    them before it knows which secret the client holds, then check the client's proof
    against each ``secrets`` entry."""

    salt: bytes
    iterations: int
    secrets: tuple[ScramSecret, ...]


class ScramError(Exception):
    """The exchange failed (malformed message, wrong nonce, wrong proof, unknown user)."""


def _hash(mechanism: str) -> str:
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ScramError(f"unsupported mechanism {mechanism!r}") from None


def derive_secret(mechanism: str, secret: str, salt: bytes, iterations: int) -> ScramSecret:
    """``StoredKey`` and ``ServerKey`` of ``secret`` (RFC 5802 section 3)."""
    name = _hash(mechanism)
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"SCRAM needs at least {MIN_ITERATIONS} iterations, not {iterations}")
    salted = hashlib.pbkdf2_hmac(name, secret.encode("utf-8"), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", name)
    return ScramSecret(
        stored_key=hashlib.new(name, client_key).digest(),
        server_key=hmac.digest(salted, b"Server Key", name),
    )


def derive_user(
    mechanism: str,
    user_secrets: Iterable[str],
    *,
    salt: bytes | None = None,
    iterations: int = DEFAULT_ITERATIONS,
) -> ScramUser:
    """A user's credentials: every secret derived with one salt (random if not given)."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    derived = tuple(derive_secret(mechanism, s, salt, iterations) for s in user_secrets)
    return ScramUser(salt=salt, iterations=iterations, secrets=derived)


def _attributes(message: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if len(key) != 1 or not sep:
            raise ScramError(f"malformed SCRAM attribute {part[:40]!r}")
        found.setdefault(key, value)
    return found


def _unescape_name(name: str) -> str:
    # RFC 5802 5.1: ',' and '=' in a name are sent as '=2C' and '=3D'; any other '=' is bad.
    out = name.replace("=2C", ",").replace("=3D", "=")
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed user name (bad '=' escape)")
    return out


@dataclass
class ClientFirst:
    """What the client's first message says."""

    username: str
    client_nonce: str
    bare: str  # client-first-message-bare, part of the AuthMessage
    extensions: dict[str, str]


def parse_first(message: bytes) -> ClientFirst:
    """Parse a client-first message.

    Raises:
        ScramError: not UTF-8, channel binding asked for, authzid, missing n= or r=.
    """
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("client-first message is not UTF-8") from None
    if not text.startswith(("n,", "y,")):
        raise ScramError("channel binding is not supported (gs2 header must be 'n,,')")
    header, _, rest = text.partition(",")
    authzid, sep, bare = rest.partition(",")
    if not sep:
        raise ScramError("malformed client-first message")
    if authzid:
        raise ScramError("an authorization identity (a=) is not supported")
    attrs = _attributes(bare)
    if "m" in attrs:
        raise ScramError("mandatory extension m= is not supported")
    if not attrs.get("n") or not attrs.get("r"):
        raise ScramError("client-first message lacks n= or r=")
    ext = {k: v for k, v in attrs.items() if k not in ("n", "r")}
    return ClientFirst(_unescape_name(attrs["n"]), attrs["r"], bare, ext)


class ScramExchange:
    """One server-side SCRAM exchange (module docstring). Use once.

    Args:
        mechanism: ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``.
        first: the parsed client-first message.
        user: the user's credentials, or None for an unknown user (a fake exchange).
        fake_key: the server's secret for fake salts (the same unknown name gets the same
            salt every time, as a real user's would).
        fake_iterations: the iteration count a fake exchange announces: the one real users'
            credentials are derived with (``CAIRN_SCRAM_ITERATIONS``), so the two look alike.
        server_nonce: for tests (RFC test vectors); random otherwise.
    """

    def __init__(
        self,
        mechanism: str,
        first: ClientFirst,
        user: ScramUser | None,
        *,
        fake_key: bytes = b"",
        fake_iterations: int = DEFAULT_ITERATIONS,
        server_nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._hash_name = _hash(mechanism)
        self.first = first
        self.user = user
        nonce = server_nonce or base64.b64encode(secrets.token_bytes(_NONCE_BYTES)).decode()
        self.nonce = first.client_nonce + nonce
        if user is None:
            salt = hmac.digest(fake_key, first.username.encode(), "sha256")[:SALT_BYTES]
            iterations = fake_iterations
        else:
            salt, iterations = user.salt, user.iterations
        self.server_first = f"r={self.nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        self.done = False

    def server_first_message(self) -> bytes:
        return self.server_first.encode()

    def finish(self, message: bytes) -> bytes:
        """Check the client-final message; return the server-final message.

        Raises:
            ScramError: malformed, a replayed or foreign nonce, a wrong proof, an unknown
                user, or a second call.
        """
        if self.done:
            raise ScramError("the exchange is over")
        self.done = True
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("client-final message is not UTF-8") from None
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise ScramError("client-final message lacks its proof")
        attrs = _attributes(without_proof)
        if attrs.get("c") != _CHANNEL_BINDING:
            raise ScramError("channel binding does not match the client-first message")
        if not hmac.compare_digest(attrs.get("r", "").encode(), self.nonce.encode()):
            raise ScramError("nonce does not match this exchange (a replayed message?)")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramError("proof is not base64") from None
        if self.user is None:
            raise ScramError(f"unknown user {self.first.username!r}")
        auth_message = f"{self.first.bare},{self.server_first},{without_proof}".encode()
        for secret in self.user.secrets:
            signature = hmac.digest(secret.stored_key, auth_message, self._hash_name)
            if len(proof) != len(signature):
                break
            client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
            if hmac.compare_digest(
                hashlib.new(self._hash_name, client_key).digest(), secret.stored_key
            ):
                server_signature = hmac.digest(secret.server_key, auth_message, self._hash_name)
                return b"v=" + base64.b64encode(server_signature)
        raise ScramError(f"wrong proof for user {self.first.username!r}")
