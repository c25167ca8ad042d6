"""SASL on the listener over raw sockets: the policy's gate, the protocol's error codes and
a closed connection for every bad exchange (the listener keeps serving others), bare v0
tokens, and KIP-368 session lifetimes on a fake clock."""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kafka_listener.errors import ErrorCode
from kafka_listener.handlers import ListenerConfig
from kafka_listener.schemas import ApiKey
from mqcore.access.authorizer import Subject
from mqcore.access.backend import LoginRefused, StaticAccess
from mqcore.clock import FakeClock
from tests.mqcore.access.test_scram import client_final

from .harness import RunningListener
from .test_server import Client

USERS = {"alice": ("operator", ("alice-pw", "alice-token")), "bob": ("viewer", ("bob-pw",))}
METADATA = {"topics": None, "allow_auto_topic_creation": False}
REAUTH_MS = 60_000


def listener(root: Path, auth: str, clock: FakeClock | None = None) -> RunningListener:
    config = ListenerConfig(port=0, auth=auth, reauth_ms=REAUTH_MS if clock else 0)
    # 8192 iterations: what unknown users' fake exchanges announce too.
    access = StaticAccess(users=USERS, scram_iterations=8192)
    return RunningListener(root, config, access=access, clock=clock)


@pytest.fixture(scope="module")
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="module")
def required(
    tmp_path_factory: pytest.TempPathFactory, clock: FakeClock
) -> Iterator[RunningListener]:
    with listener(Path(tmp_path_factory.mktemp("required")), "required", clock) as r:
        yield r


@pytest.fixture
def client(required: RunningListener) -> Iterator[Client]:
    c = Client(required.port)
    yield c
    c.close()


def handshake(client: Client, mechanism: str, version: int = 1) -> dict[str, Any]:
    return client.request(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})


def authenticate(client: Client, token: bytes, version: int = 1) -> dict[str, Any]:
    return client.request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token})


def plain_login(client: Client, user: str, password: str, version: int = 1) -> dict[str, Any]:
    assert handshake(client, "PLAIN")["error_code"] == 0
    return authenticate(client, f"\0{user}\0{password}".encode(), version)


def scram_login(
    client: Client, mechanism: str, user: str, password: str
) -> tuple[dict[str, Any], bytes]:
    """A SCRAM exchange; returns the last reply and the client-final message sent."""
    assert handshake(client, mechanism)["error_code"] == 0
    bare = f"n={user},r=clientnonce123"
    first = authenticate(client, f"n,,{bare}".encode())
    assert first["error_code"] == 0, first
    final = client_final(mechanism, password, bare, first["auth_bytes"])
    return authenticate(client, final), final


def test_api_versions_and_sasl_are_the_only_requests_before_login(client: Client) -> None:
    versions = client.request(ApiKey.API_VERSIONS, 2, {})
    table = {k["api_key"]: (k["min_version"], k["max_version"]) for k in versions["api_keys"]}
    assert table[ApiKey.SASL_HANDSHAKE] == (0, 1) and table[ApiKey.SASL_AUTHENTICATE] == (0, 2)
    client.send(ApiKey.METADATA, 1, METADATA)
    assert client.closed_by_server()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_plain_with_password_or_token(required: RunningListener, version: int) -> None:
    for secret in ("alice-pw", "alice-token"):
        client = Client(required.port)
        reply = plain_login(client, "alice", secret, version)
        assert reply["error_code"] == 0 and reply["auth_bytes"] == b""
        if version >= 1:
            assert reply["session_lifetime_ms"] == REAUTH_MS
        assert client.request(ApiKey.METADATA, 1, METADATA)["brokers"]
        assert any(s.user == "alice" and s.role == "operator" for s in required.listener.subjects())  # type: ignore[union-attr]
        client.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_logs_in_with_the_server_signature(client: Client, mechanism: str) -> None:
    reply, _ = scram_login(client, mechanism, "bob", "bob-pw")
    assert reply["error_code"] == 0 and reply["auth_bytes"].startswith(b"v=")
    assert client.request(ApiKey.METADATA, 1, METADATA)["brokers"]


def test_wrong_password_is_refused_and_others_are_served(required: RunningListener) -> None:
    bad, good = Client(required.port), Client(required.port)
    reply = plain_login(bad, "alice", "nope")
    assert reply["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "nope" not in (reply["error_message"] or "")
    assert bad.closed_by_server()
    bad.close()
    assert plain_login(good, "bob", "bob-pw")["error_code"] == 0
    assert good.request(ApiKey.METADATA, 1, METADATA)["brokers"]
    good.close()


@pytest.mark.parametrize("user", ["alice", "nobody"])
def test_scram_wrong_proof_and_unknown_user_look_alike(client: Client, user: str) -> None:
    assert handshake(client, "SCRAM-SHA-256")["error_code"] == 0
    first = authenticate(client, f"n,,n={user},r=abc".encode())
    attrs = dict(p.split("=", 1) for p in first["auth_bytes"].decode().split(","))
    assert first["error_code"] == 0 and attrs["i"] == "8192" and len(attrs["s"]) == 24
    final = client_final("SCRAM-SHA-256", "wrong", f"n={user},r=abc", first["auth_bytes"])
    reply = authenticate(client, final)
    assert reply["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert user not in (reply["error_message"] or "")
    assert client.closed_by_server()


def test_replayed_client_final_is_refused(required: RunningListener) -> None:
    first = Client(required.port)
    reply, final = scram_login(first, "SCRAM-SHA-512", "alice", "alice-pw")
    assert reply["error_code"] == 0
    again = Client(required.port)
    assert handshake(again, "SCRAM-SHA-512")["error_code"] == 0
    assert authenticate(again, b"n,,n=alice,r=clientnonce123")["error_code"] == 0
    replayed = authenticate(again, final)  # the nonce of the earlier exchange
    assert replayed["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert again.closed_by_server()
    again.close()
    assert first.request(ApiKey.METADATA, 1, METADATA)["brokers"]  # the first goes on
    first.close()


@pytest.mark.parametrize(
    "token",
    [b"", b"garbage", b"p=tls-unique,,n=alice,r=x", b"n,a=bob,n=alice,r=x", b"n,,r=x", b"\xff"],
)
def test_malformed_scram_client_first(client: Client, token: bytes) -> None:
    assert handshake(client, "SCRAM-SHA-256")["error_code"] == 0
    reply = authenticate(client, token)
    assert reply["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert client.closed_by_server()


@pytest.mark.parametrize("final", [b"", b"c=biws", b"c=eHl6,r=clientnonce123,p=AAAA", b"\xff"])
def test_malformed_scram_client_final(client: Client, final: bytes) -> None:
    assert handshake(client, "SCRAM-SHA-512")["error_code"] == 0
    assert authenticate(client, b"n,,n=alice,r=clientnonce123")["error_code"] == 0
    assert authenticate(client, final)["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert client.closed_by_server()


@pytest.mark.parametrize(
    "token", [b"alice\0pw", b"\0alice\0", b"bob\0alice\0alice-pw", b"\0\xff\0x"]
)
def test_malformed_plain(client: Client, token: bytes) -> None:
    assert handshake(client, "PLAIN")["error_code"] == 0
    assert authenticate(client, token)["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert client.closed_by_server()


def test_bad_mechanism_gets_33_and_the_list(client: Client) -> None:
    reply = handshake(client, "GSSAPI")
    assert reply["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert reply["mechanisms"] == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert client.closed_by_server()


def test_authenticate_before_handshake_is_an_illegal_state(client: Client) -> None:
    assert authenticate(client, b"\0alice\0alice-pw")["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    assert client.closed_by_server()


def test_requests_during_an_exchange_close(client: Client) -> None:
    assert handshake(client, "PLAIN")["error_code"] == 0
    client.send(ApiKey.METADATA, 1, METADATA)
    assert client.closed_by_server()


def bare(client: Client, token: bytes) -> bytes:
    client.sock.sendall(struct.pack(">i", len(token)) + token)
    size = struct.unpack(">i", client._exactly(4))[0]
    return client._exactly(size)


def test_v0_handshake_plain_with_bare_tokens(client: Client) -> None:
    assert handshake(client, "PLAIN", version=0)["error_code"] == 0
    assert bare(client, b"\0alice\0alice-pw") == b""  # Kafka answers PLAIN with an empty token
    assert client.request(ApiKey.METADATA, 1, METADATA)["brokers"]  # Kafka framing again


def test_v0_handshake_scram_with_bare_tokens(client: Client) -> None:
    assert handshake(client, "SCRAM-SHA-256", version=0)["error_code"] == 0
    server_first = bare(client, b"n,,n=bob,r=barenonce")
    final = client_final("SCRAM-SHA-256", "bob-pw", "n=bob,r=barenonce", server_first)
    assert bare(client, final).startswith(b"v=")
    assert client.request(ApiKey.METADATA, 1, METADATA)["brokers"]


def test_v0_bare_token_failure_just_closes(client: Client) -> None:
    assert handshake(client, "PLAIN", version=0)["error_code"] == 0
    client.sock.sendall(struct.pack(">i", 12) + b"\0alice\0wrong")
    assert client.closed_by_server()


def test_session_expires_without_reauthentication(client: Client, clock: FakeClock) -> None:
    assert plain_login(client, "alice", "alice-pw")["error_code"] == 0
    assert client.request(ApiKey.METADATA, 1, METADATA)["brokers"]
    clock.advance(REAUTH_MS)
    client.send(ApiKey.METADATA, 1, METADATA)
    assert client.closed_by_server()


def test_reauthentication_must_keep_the_mechanism(client: Client) -> None:
    assert plain_login(client, "alice", "alice-pw")["error_code"] == 0
    reply = handshake(client, "SCRAM-SHA-256")
    assert reply["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    assert client.closed_by_server()


def test_reauthentication_keeps_the_user(required: RunningListener, clock: FakeClock) -> None:
    client = Client(required.port)
    assert plain_login(client, "alice", "alice-pw")["error_code"] == 0
    clock.advance(REAUTH_MS - 1000)
    assert plain_login(client, "alice", "alice-token")["session_lifetime_ms"] == REAUTH_MS
    clock.advance(2000)  # past the first login's expiry, within the second's
    assert client.request(ApiKey.METADATA, 1, METADATA)["brokers"]
    reply = plain_login(client, "bob", "bob-pw")
    assert reply["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert client.closed_by_server()
    client.close()


def test_optional_lets_anonymous_act_as_the_role(tmp_path: Path) -> None:
    with listener(tmp_path, "optional") as running:
        client = Client(running.port)
        assert client.request(ApiKey.METADATA, 1, METADATA)["brokers"]
        (subject,) = running.listener.subjects()  # type: ignore[union-attr]
        assert (subject.user, subject.role, subject.front_end) == (None, "operator", "kafka")
        # A connection that went on anonymously cannot log in later.
        assert handshake(client, "PLAIN")["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
        assert client.closed_by_server()
        client.close()
        logged_in = Client(running.port)
        assert plain_login(logged_in, "bob", "bob-pw")["session_lifetime_ms"] == 0
        assert logged_in.request(ApiKey.METADATA, 1, METADATA)["brokers"]
        assert [(s.user, s.role) for s in running.listener.subjects()] == [("bob", "viewer")]  # type: ignore[union-attr]
        logged_in.close()


def test_none_offers_no_sasl(tmp_path: Path) -> None:
    with listener(tmp_path, "none") as running:
        client = Client(running.port)
        versions = client.request(ApiKey.API_VERSIONS, 2, {})
        keys = {k["api_key"] for k in versions["api_keys"]}
        assert ApiKey.SASL_HANDSHAKE not in keys and ApiKey.SASL_AUTHENTICATE not in keys
        client.send(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        assert client.closed_by_server()
        client.close()


class RecordingAccess(StaticAccess):
    """StaticAccess that keeps what each login call was told (no secrets)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.calls: list[tuple[str, str, str, str]] = []

    def authenticate_password(
        self, username: str, secret: str, host: str, front_end: str
    ) -> Subject | LoginRefused:
        self.calls.append(("password", username, host, front_end))
        return super().authenticate_password(username, secret, host, front_end)

    def login_finished(
        self, username: str, host: str, front_end: str, succeeded: bool, mechanism: str
    ) -> Subject | LoginRefused:
        self.calls.append((f"finished {mechanism} {succeeded}", username, host, front_end))
        return super().login_finished(username, host, front_end, succeeded, mechanism)


def test_logins_reach_the_backend_with_address_and_front_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    access = RecordingAccess(users=USERS, locked={"bob"})
    caplog.set_level(logging.INFO, logger="kafka_listener")
    config = ListenerConfig(port=0, auth="required")
    with RunningListener(tmp_path, config, access=access) as running:
        for login in (
            lambda c: plain_login(c, "alice", "secret-guess"),
            lambda c: scram_login(c, "SCRAM-SHA-256", "alice", "alice-pw")[0],
            lambda c: scram_login(c, "SCRAM-SHA-512", "alice", "wrong-guess")[0],
        ):
            client = Client(running.port)
            login(client)
            client.close()
        locked = Client(running.port)  # locked out: refused before any secret is looked at
        reply = plain_login(locked, "bob", "bob-pw")
        assert reply["error_code"] == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert "locked" not in reply["error_message"]  # the reason is for the log only
        locked.close()
    assert access.calls == [
        ("password", "alice", "127.0.0.1", "kafka"),
        ("finished SCRAM-SHA-256 True", "alice", "127.0.0.1", "kafka"),
        ("finished SCRAM-SHA-512 False", "alice", "127.0.0.1", "kafka"),
    ]
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 3 and all("127.0.0.1" in r for r in refusals)
    assert "locked out" in refusals[-1]
    assert not any("guess" in r.getMessage() for r in caplog.records)  # no secret in the log
