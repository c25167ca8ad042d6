"""The SASL session state machine alone (sans I/O): the policy's gate, the steps it asks the
server to run against the accounts store, session lifetimes, and the hot path's flag."""

from __future__ import annotations

import pytest

from kafka_listener.errors import ErrorCode
from kafka_listener.sasl import CheckPassword, FinishScram, LookUpScram, Phase, Reply, SaslSession
from kafka_listener.schemas import ApiKey
from mqcore.access.authorizer import Subject
from mqcore.access.backend import LoginRefused
from mqcore.access.scram import derive_user
from tests.mqcore.access.test_scram import client_final

ANONYMOUS = Subject(None, "operator", "10.0.0.1", "kafka")
ALICE = Subject("alice", "viewer", "10.0.0.1", "kafka")


def session(policy: str = "required", reauth_ms: int = 0, **kw: object) -> SaslSession:
    return SaslSession(policy, ANONYMOUS, reauth_ms, b"k" * 32, **kw)  # type: ignore[arg-type]


def test_required_admits_only_versions_and_sasl_before_login() -> None:
    s = session()
    assert s.admit(ApiKey.API_VERSIONS, 0) is None
    assert "did not authenticate" in (s.admit(ApiKey.PRODUCE, 0) or "")
    assert s.gated


@pytest.mark.parametrize("policy", ["optional", "none"])
def test_anonymous_connections_settle_and_stop_being_checked(policy: str) -> None:
    s = session(policy)
    assert s.admit(ApiKey.METADATA, 0) is None
    assert s.phase is Phase.ANONYMOUS and not s.gated and s.subject == ANONYMOUS
    reply, _ = s.handshake(1, "PLAIN")  # too late to log in
    assert reply.error_code == ErrorCode.ILLEGAL_SASL_STATE and reply.close


def test_a_certificate_subject_is_taken_on_the_first_ordinary_request() -> None:
    s = session(certified=ALICE)
    assert s.admit(ApiKey.PRODUCE, 0) is None
    assert s.subject == ALICE and not s.gated


def test_plain_asks_for_a_password_check_and_sets_the_lifetime() -> None:
    s = session(reauth_ms=5000)
    reply, offered = s.handshake(1, "PLAIN")
    assert reply == Reply() and offered == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert s.admit(ApiKey.PRODUCE, 0) is not None  # not during the exchange
    step = s.authenticate(b"alice\0alice\0pw", 2)
    assert step == CheckPassword("alice", "pw")
    done = s.login_result(ALICE, now_ms=1000)
    assert done.error_code == 0 and done.session_lifetime_ms == 5000
    assert s.subject == ALICE and s.gated  # gated: the lifetime is checked per request
    assert s.admit(ApiKey.PRODUCE, 5999) is None
    assert "expired" in (s.admit(ApiKey.PRODUCE, 6000) or "")


def test_no_lifetime_means_no_check_per_request() -> None:
    s = session()
    s.handshake(1, "PLAIN")
    s.authenticate(b"\0alice\0pw", 1)
    assert s.login_result(ALICE, 0).session_lifetime_ms == 0
    assert not s.gated


def test_a_refused_login_fails_and_closes() -> None:
    s = session()
    s.handshake(1, "PLAIN")
    s.authenticate(b"\0alice\0pw", 1)
    reply = s.login_result(LoginRefused("locked out", locked=True), 0)
    assert reply.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and reply.close
    assert s.phase is Phase.FAILED


def test_scram_steps_and_the_server_signature() -> None:
    s = session()
    s.handshake(1, "SCRAM-SHA-256")
    assert s.authenticate(b"n,,n=alice,r=nonce", 1) == LookUpScram("SCRAM-SHA-256", "alice")
    first = s.scram_user_found(derive_user("SCRAM-SHA-256", ["pw"], iterations=4096), None)
    final = client_final("SCRAM-SHA-256", "pw", "n=alice,r=nonce", first.auth_bytes)
    step = s.authenticate(final, 1)
    assert step == FinishScram("SCRAM-SHA-256", "alice", True, "")
    assert s.login_result(ALICE, 0).auth_bytes.startswith(b"v=")


def test_scram_wrong_proof_is_reported_as_a_failed_login() -> None:
    s = session()
    s.handshake(1, "SCRAM-SHA-512")
    s.authenticate(b"n,,n=alice,r=nonce", 1)
    first = s.scram_user_found(derive_user("SCRAM-SHA-512", ["pw"], iterations=4096), None)
    final = client_final("SCRAM-SHA-512", "wrong", "n=alice,r=nonce", first.auth_bytes)
    step = s.authenticate(final, 1)
    assert isinstance(step, FinishScram) and not step.succeeded and "wrong proof" in step.detail


def test_bare_tokens_follow_a_v0_handshake_only() -> None:
    s = session()
    s.handshake(0, "PLAIN")
    assert s.bare_tokens
    s.authenticate(b"\0alice\0pw", 0)
    s.login_result(ALICE, 0)
    assert not s.bare_tokens


def test_an_unknown_users_exchange_announces_the_real_iteration_count() -> None:
    s = SaslSession("required", ANONYMOUS, 0, b"k" * 32, fake_iterations=16384)
    s.handshake(1, "SCRAM-SHA-512")
    assert s.authenticate(b"n,,n=nobody,r=nonce", 1) == LookUpScram("SCRAM-SHA-512", "nobody")
    first = s.scram_user_found(None, None).auth_bytes.decode()
    assert first.startswith("r=nonce") and first.endswith(",i=16384")
