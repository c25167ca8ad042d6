"""SASL on one Kafka connection, sans I/O: who the connection is, and what it may ask now.

:class:`SaslSession` is the per-connection state machine. It never touches a socket, a clock
or the accounts store: the server passes the time in (``now_ms``) and runs the look-ups a
step asks for (:class:`CheckPassword`, :class:`LookUpScram`, :class:`FinishScram`) against
the :class:`~mqcore.access.backend.AccessBackend` off the event loop (``login.py``), then
feeds the answer back. Every step ends in a :class:`Reply` (the SaslHandshake or
SaslAuthenticate answer, or a bare token after a v0 handshake) that may ask for the
connection to be closed once sent.

States (Kafka's ``SaslServerAuthenticator``, with Cairn's listener policy)::

    START ──SaslHandshake──▶ HANDSHAKEN ──token(s)──▶ AUTHENTICATED ──SaslHandshake──▶ (re-auth)
      │                                    │ failure: error reply, then close
      └─ any other request: under ``required`` close; with a client certificate's subject,
         AUTHENTICATED; under ``optional``/``none``, ANONYMOUS for good

* Before authentication under ``required``, only ApiVersions, SaslHandshake and
  SaslAuthenticate are answered (:data:`BEFORE_AUTHENTICATION`); anything else closes the
  connection. Between a handshake and the end of its exchange only SaslAuthenticate (or
  the bare tokens of a v0 handshake) and ApiVersions are answered.
* Mechanisms: PLAIN (RFC 4616: ``authzid NUL authcid NUL password``; the password is the
  user's password or one of its API tokens), SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802 and
  7677, ``mqcore.access.scram``). An unknown user gets a complete, fake SCRAM exchange that
  fails at the proof, like a wrong password.
* Errors, as Kafka answers them, each followed by closing the connection: a mechanism not
  offered is UNSUPPORTED_SASL_MECHANISM (33), a request out of order ILLEGAL_SASL_STATE
  (34), a malformed, replayed or wrong token SASL_AUTHENTICATION_FAILED (58) with a message
  that says "authentication failed" plus what was malformed; a login the accounts store
  refused gets the same words whatever the reason (unknown user, wrong secret, locked out),
  the reason going to the log only (:attr:`Reply.detail`).
* Re-authentication (KIP-368): with ``reauth_ms`` > 0, SaslAuthenticate v1+ answers carry
  ``session_lifetime_ms`` and the session expires that long after each login; a request
  other than SaslHandshake/SaslAuthenticate/ApiVersions after expiry closes the connection
  (:meth:`SaslSession.admit`). A re-authentication must name the same user.

The hot path: once authenticated (or anonymous) with no expiry, :attr:`SaslSession.gated` is
False and the server skips :meth:`~SaslSession.admit` entirely.

Thread-safety: none; one session per connection, used from its task.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mqcore.access.authorizer import Subject
from mqcore.access.backend import LoginRefused
from mqcore.access.scram import (
    DEFAULT_ITERATIONS,
    ClientFirst,
    ScramError,
    ScramExchange,
    ScramUser,
    parse_first,
)
from mqcore.access.scram import MECHANISMS as SCRAM_MECHANISMS

from .errors import ErrorCode
from .schemas import ApiKey

PLAIN = "PLAIN"
#: What SaslHandshake offers, in Kafka's order.
MECHANISMS: tuple[str, ...] = (PLAIN, *SCRAM_MECHANISMS)
#: Answered before a connection authenticated (Kafka: ApiVersions must be, KIP-511).
BEFORE_AUTHENTICATION = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
)
SASL_KEYS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
POLICIES = ("required", "optional", "none")
_FAILED = "authentication failed"


class Phase(enum.Enum):
    START = "start"
    HANDSHAKEN = "handshaken"  # a mechanism was chosen; its first token is due
    SCRAM_FINAL = "scram-final"  # the server-first message went out; client-final is due
    LOOKING_UP = "looking-up"  # waiting for the server's answer from the accounts store
    AUTHENTICATED = "authenticated"
    ANONYMOUS = "anonymous"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to a SASL request. ``close``: close the connection once it is sent.
    ``detail``: why, for the log only (a refused login's reason, which the client is not
    told: it would say whether the user exists or is locked out)."""

    error_code: int = ErrorCode.NONE
    error_message: str | None = None
    auth_bytes: bytes = b""
    close: bool = False
    session_lifetime_ms: int = 0
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class CheckPassword:
    """PLAIN: check ``password`` (or API token) of ``username`` (login_allowed first)."""

    username: str
    password: str


@dataclass(frozen=True, slots=True)
class LookUpScram:
    """SCRAM: the user's credentials for ``mechanism`` (login_allowed first)."""

    mechanism: str
    username: str


@dataclass(frozen=True, slots=True)
class FinishScram:
    """SCRAM: record the outcome of the proof check (login_finished)."""

    mechanism: str
    username: str
    succeeded: bool
    detail: str


Step = Reply | CheckPassword | LookUpScram | FinishScram


def _fail(detail: str, code: int = ErrorCode.SASL_AUTHENTICATION_FAILED) -> Reply:
    return Reply(code, detail, close=True, detail=detail)


class SaslSession:
    """One connection's authentication state (module docstring).

    Args:
        policy: ``required``, ``optional`` or ``none`` (``CAIRN_KAFKA_AUTH``).
        anonymous: the subject of an unauthenticated connection under ``optional``/``none``.
        reauth_ms: KIP-368 session lifetime; 0: sessions never expire.
        fake_key: the listener's secret for unknown users' fake SCRAM salts.
        fake_iterations: the iteration count unknown users' fake exchanges announce (real
            users' count, so that the two cannot be told apart).
        certified: the subject of a verified TLS client certificate, if any; a connection
            that asks anything but SASL first is that subject.
    """

    def __init__(
        self,
        policy: str,
        anonymous: Subject,
        reauth_ms: int = 0,
        fake_key: bytes = b"",
        certified: Subject | None = None,
        fake_iterations: int = DEFAULT_ITERATIONS,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown Kafka auth policy {policy!r}")
        self.policy = policy
        self.reauth_ms = reauth_ms
        self._fake_key = fake_key
        self._fake_iterations = fake_iterations
        self._certified = certified
        self._anonymous = anonymous
        self.phase = Phase.START
        #: Who the connection acts as now (anonymous until it authenticates).
        self.subject: Subject = anonymous
        #: The user a SASL login established (re-authentication must keep it).
        self.user: str | None = None
        self.mechanism: str | None = None
        self.expires_ms: int | None = None
        #: False only when a request needs no check at all (the hot path).
        self.gated = True
        self._bare = False
        self._handshake_version = 1
        self._authenticate_version = 0
        self._first: ClientFirst | None = None
        self._exchange: ScramExchange | None = None
        self._final: bytes = b""

    # -- what may be asked -------------------------------------------------------------

    def admit(self, api_key: int, now_ms: int) -> str | None:
        """Whether a request of ``api_key`` may be answered now: None if so, else why the
        connection must be closed. Moves START to AUTHENTICATED (certificate) or
        ANONYMOUS on a first ordinary request where the policy allows it."""
        if api_key in BEFORE_AUTHENTICATION:
            return None
        phase = self.phase
        if phase is Phase.AUTHENTICATED:
            if self.expires_ms is not None and now_ms >= self.expires_ms:
                return "its SASL session expired without re-authentication"
            return None
        if phase is Phase.ANONYMOUS:
            return None
        if phase is Phase.START:
            if self._certified is not None:
                self._settle(self._certified, None)
                return None
            if self.policy != "required":
                self.phase = Phase.ANONYMOUS
                self.gated = False
                return None
            return "it did not authenticate (CAIRN_KAFKA_AUTH=required)"
        return f"API {api_key} is not allowed during a SASL exchange"

    # -- SaslHandshake -----------------------------------------------------------------

    def handshake(self, version: int, mechanism: str) -> tuple[Reply, list[str]]:
        """Answer a SaslHandshake; returns the reply and the mechanisms to list in it."""
        offered = list(MECHANISMS)
        if self.phase not in (Phase.START, Phase.AUTHENTICATED):
            return _fail(
                f"SaslHandshake in state {self.phase.value}", ErrorCode.ILLEGAL_SASL_STATE
            ), offered
        if self.phase is Phase.AUTHENTICATED and (self.user is None or version == 0):
            # Only a SASL login can be renewed, and only through SaslAuthenticate (KIP-368).
            return _fail(
                "re-authentication needs a SASL login and SaslHandshake v1",
                ErrorCode.ILLEGAL_SASL_STATE,
            ), offered
        if mechanism not in MECHANISMS:
            self.phase = Phase.FAILED
            return _fail(
                f"mechanism {mechanism[:40]!r} is not offered", ErrorCode.UNSUPPORTED_SASL_MECHANISM
            ), offered
        if self.phase is Phase.AUTHENTICATED and mechanism != self.mechanism:
            return _fail(
                "re-authentication must use the same mechanism", ErrorCode.ILLEGAL_SASL_STATE
            ), offered
        self.mechanism = mechanism
        self.phase = Phase.HANDSHAKEN
        self.gated = True
        self._bare = version == 0
        self._handshake_version = version
        return Reply(), offered  # fmt: skip

    @property
    def bare_tokens(self) -> bool:
        """Tokens travel without Kafka headers (a v0 handshake)."""
        return self._bare

    # -- SaslAuthenticate (or a bare token) -----------------------------------------------

    def authenticate(self, token: bytes, version: int = 0) -> Step:
        """The next step for a client token (SaslAuthenticate ``version``; 0 for bare)."""
        self._authenticate_version = version
        if self.phase is Phase.HANDSHAKEN:
            self.phase = Phase.LOOKING_UP
            if self.mechanism == PLAIN:
                return self._plain(token)
            return self._scram_first(token)
        if self.phase is Phase.SCRAM_FINAL:
            return self._scram_final(token)
        state, self.phase = self.phase, Phase.FAILED
        return _fail(f"SaslAuthenticate in state {state.value}", ErrorCode.ILLEGAL_SASL_STATE)

    def _plain(self, token: bytes) -> Step:
        parts = token.split(b"\0")
        if len(parts) != 3 or not parts[1] or not parts[2]:
            return self._failed("malformed PLAIN token (expected authzid NUL user NUL password)")
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            return self._failed("PLAIN token is not UTF-8")
        if authzid and authzid != username:
            return self._failed("an authorization id other than the user is not supported")
        if self.user is not None and username != self.user:
            return self._failed("re-authentication must keep the same user")
        return CheckPassword(username, password)

    def _scram_first(self, token: bytes) -> Step:
        try:
            first = parse_first(token)
        except ScramError as exc:
            return self._failed(f"malformed SCRAM client-first message: {exc}")
        if self.user is not None and first.username != self.user:
            return self._failed("re-authentication must keep the same user")
        self._first = first
        assert self.mechanism is not None
        return LookUpScram(self.mechanism, first.username)

    def scram_user_found(self, user: ScramUser | None, refused: LoginRefused | None) -> Reply:
        """The look-up's answer: the user's credentials (None: unknown: a fake exchange),
        or why the user may not log in now (locked out)."""
        if refused is not None:
            return self._refused(refused.reason)
        assert self._first is not None and self.mechanism is not None
        self._exchange = ScramExchange(
            self.mechanism,
            self._first,
            user,
            fake_key=self._fake_key,
            fake_iterations=self._fake_iterations,
        )
        self.phase = Phase.SCRAM_FINAL
        return Reply(auth_bytes=self._exchange.server_first_message())

    def _scram_final(self, token: bytes) -> Step:
        exchange, first = self._exchange, self._first
        assert exchange is not None and first is not None and self.mechanism is not None
        self.phase = Phase.LOOKING_UP
        try:
            self._final = exchange.finish(token)
        except ScramError as exc:
            return FinishScram(self.mechanism, first.username, False, str(exc))
        return FinishScram(self.mechanism, first.username, True, "")

    # -- outcomes ------------------------------------------------------------------------

    def login_result(self, result: Subject | LoginRefused, now_ms: int) -> Reply:
        """The accounts store's verdict (authenticate_password or login_finished)."""
        if isinstance(result, LoginRefused):
            return self._refused(result.reason)
        if self.user is not None and result.user != self.user:
            return self._failed("re-authentication must keep the same user")
        final = self._final if self.mechanism != PLAIN else b""
        self._settle(result, now_ms)
        self._final, self._exchange, self._first = b"", None, None
        lifetime = self.reauth_ms if self._authenticate_version >= 1 else 0
        return Reply(auth_bytes=final, session_lifetime_ms=lifetime)

    def _settle(self, subject: Subject, now_ms: int | None) -> None:
        self.subject = subject
        self.phase = Phase.AUTHENTICATED
        self._bare = False
        if now_ms is not None:  # a SASL login (a certificate's session does not expire)
            self.user = subject.user
            self.expires_ms = now_ms + self.reauth_ms if self.reauth_ms > 0 else None
        self.gated = self.expires_ms is not None

    def _failed(self, detail: str) -> Reply:
        """A failure the client may be told about (what it sent was malformed)."""
        self.phase = Phase.FAILED
        return _fail(f"{_FAILED}: {detail}")

    def _refused(self, reason: str) -> Reply:
        """The accounts store refused the login: the client learns only that it failed."""
        self.phase = Phase.FAILED
        code = ErrorCode.SASL_AUTHENTICATION_FAILED
        return Reply(code, f"{_FAILED}: wrong user name or secret, or not allowed now",
                     close=True, detail=f"{_FAILED}: {reason}")  # fmt: skip
