"""SCRAM server side against RFC 7677's test vector and a client written from RFC 5802."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from mqcore.access.scram import (
    ScramError,
    ScramExchange,
    derive_user,
    parse_first,
)

# RFC 7677 section 3.
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc_7677_vector() -> None:
    user = derive_user("SCRAM-SHA-256", ["pencil"], salt=SALT, iterations=4096)
    exchange = ScramExchange(
        "SCRAM-SHA-256", parse_first(CLIENT_FIRST), user, server_nonce=SERVER_NONCE
    )
    assert exchange.server_first_message() == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert exchange.finish(CLIENT_FINAL) == SERVER_FINAL


def client_final(mechanism: str, password: str, first_bare: str, server_first: bytes) -> bytes:
    """An RFC 5802 client's final message."""
    name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    attrs = dict(p.split("=", 1) for p in server_first.decode().split(","))
    salted = hashlib.pbkdf2_hmac(
        name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.digest(salted, b"Client Key", name)
    stored = hashlib.new(name, client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth = f"{first_bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.digest(stored, auth, name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("secret", ["the password", "token-2"])
def test_any_of_a_users_secrets_logs_in(mechanism: str, secret: str) -> None:
    user = derive_user(mechanism, ["the password", "token-1", "token-2"], iterations=4096)
    first = parse_first(b"n,,n=al=2Cice,r=abc123")
    assert first.username == "al,ice"
    exchange = ScramExchange(mechanism, first, user)
    final = client_final(mechanism, secret, first.bare, exchange.server_first_message())
    assert exchange.finish(final).startswith(b"v=")


def test_wrong_password_replay_and_unknown_user_fail() -> None:
    mechanism = "SCRAM-SHA-512"
    user = derive_user(mechanism, ["right"], iterations=4096)
    first = parse_first(b"n,,n=bob,r=nonce1")
    one = ScramExchange(mechanism, first, user)
    with pytest.raises(ScramError, match="wrong proof"):
        one.finish(client_final(mechanism, "wrong", first.bare, one.server_first_message()))
    two = ScramExchange(mechanism, first, user)
    good_for_two = client_final(mechanism, "right", first.bare, two.server_first_message())
    three = ScramExchange(mechanism, first, user)
    with pytest.raises(ScramError, match="nonce"):
        three.finish(good_for_two)  # replayed into another exchange
    assert two.finish(good_for_two).startswith(b"v=")
    with pytest.raises(ScramError, match="over"):
        two.finish(good_for_two)
    ghost = ScramExchange(mechanism, parse_first(b"n,,n=ghost,r=x"), None, fake_key=b"k")
    again = ScramExchange(mechanism, parse_first(b"n,,n=ghost,r=y"), None, fake_key=b"k")
    salt = lambda e: e.server_first.split(",")[1]  # noqa: E731
    assert salt(ghost) == salt(again)  # looks like a real user's stable salt
    with pytest.raises(ScramError, match="unknown user"):
        ghost.finish(client_final(mechanism, "x", "n=ghost,r=x", ghost.server_first_message()))


@pytest.mark.parametrize(
    "message",
    [
        b"\xff",
        b"p=tls-unique,,n=a,r=b",
        b"n,a=admin,n=a,r=b",
        b"n,,n=a",
        b"n,,r=b",
        b"n,,n=a=2X,r=b",
        b"n,,m=ext,n=a,r=b",
        b"n,,garbage",
    ],
)
def test_malformed_client_first_is_refused(message: bytes) -> None:
    with pytest.raises(ScramError):
        parse_first(message)


@pytest.mark.parametrize(
    "final", [b"\xff", b"c=biws,r=abcxyz", b"c=eSws,r=abc,p=AAAA", b"c=biws,r=abc,p=!!notb64"]
)
def test_malformed_client_final_is_refused(final: bytes) -> None:
    user = derive_user("SCRAM-SHA-256", ["pw"], iterations=4096)
    exchange = ScramExchange("SCRAM-SHA-256", parse_first(b"n,,n=a,r=abc"), user)
    with pytest.raises(ScramError):
        exchange.finish(final)


def test_too_few_iterations_and_unknown_mechanism() -> None:
    with pytest.raises(ValueError):
        derive_user("SCRAM-SHA-256", ["pw"], iterations=1000)
    with pytest.raises(ScramError):
        derive_user("SCRAM-SHA-1", ["pw"])
