"""API tokens over REST (hashed, named, expiring, last use, revoked; a user manages its own)
and login hardening: throttling per user and per address, lockout, lifting it, the audit."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import ApiToken, AuditEntry
from tests.api.conftest import assert_problem

pytestmark = pytest.mark.django_db


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def every_stored_text() -> Iterator[str]:
    """Every value of every row of every table in the database, as text."""
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f'SELECT * FROM "{table}"')
            for row in cursor.fetchall():
                for value in row:
                    yield value.hex() if isinstance(value, bytes | memoryview) else str(value)


def test_tokens_are_issued_once_stored_hashed_listed_and_revoked(
    viewer: APIClient, broker_runtime: Any
) -> None:
    r = viewer.post("/api/v1/tokens", {"name": "laptop"}, format="json")
    assert r.status_code == 201, r.content
    issued = r.json()
    text = issued["token"]
    assert issued["username"] == "vera" and issued["expires"] is None
    # Shown once: no table holds it in clear (nor its hex).
    stored = list(every_stored_text())
    assert not any(text in value or text.encode().hex() in value for value in stored)
    assert ApiToken.objects.get(pk=issued["id"]).digest in stored
    mine = bearer(text)
    assert mine.get("/api/v1/topics").status_code == 200
    listed = viewer.get("/api/v1/tokens").json()["results"]
    laptop = next(t for t in listed if t["id"] == issued["id"])
    assert laptop["last_used"] is not None and "token" not in laptop
    # Used again within the minute: last use is not written again.
    before = ApiToken.objects.get(pk=issued["id"]).last_used
    assert mine.get("/api/v1/topics").status_code == 200
    assert ApiToken.objects.get(pk=issued["id"]).last_used == before
    # Revoked: refused at once; revoking is audited, with the actor's principal.
    assert viewer.delete(f"/api/v1/tokens/{issued['id']}").json()["revoked"] is not None
    body = assert_problem(mine.get("/api/v1/topics"), 401)
    assert body["detail"] == "Invalid token."
    actions = list(
        AuditEntry.objects.filter(action__startswith="token.")
        .order_by("id")
        .values_list("action", "principal", "front_end")
    )
    assert actions == [("token.issue", "User:vera", "rest"), ("token.revoke", "User:vera", "rest")]


def test_an_expired_token_is_refused(viewer: APIClient) -> None:
    soon = int(time.time() * 1000) + 1500
    text = viewer.post("/api/v1/tokens", {"name": "brief", "expires": soon}, format="json").json()[
        "token"
    ]
    assert bearer(text).get("/api/v1/topics").status_code == 200
    time.sleep(1.8)  # an expiry counts up to 0.1 s late (api.authentication._times)
    assert assert_problem(bearer(text).get("/api/v1/topics"), 401)["detail"] == "Token expired."


def test_users_manage_their_own_tokens_admins_anyones(
    viewer: APIClient, operator: APIClient, admin: APIClient
) -> None:
    vera_token = viewer.post("/api/v1/tokens", {"name": "v"}, format="json").json()
    assert_problem(operator.get("/api/v1/tokens?username=vera"), 403)
    assert_problem(
        operator.post("/api/v1/tokens", {"name": "x", "username": "vera"}, format="json"), 403
    )
    assert_problem(operator.delete(f"/api/v1/tokens/{vera_token['id']}"), 404)
    assert_problem(operator.get(f"/api/v1/tokens/{vera_token['id']}"), 404)
    names = [t["name"] for t in admin.get("/api/v1/tokens?username=vera").json()["results"]]
    assert "v" in names
    made = admin.post("/api/v1/tokens", {"name": "ops", "username": "otto"}, format="json")
    assert made.status_code == 201 and made.json()["username"] == "otto"
    assert admin.delete(f"/api/v1/tokens/{vera_token['id']}").status_code == 200
    assert_problem(admin.delete("/api/v1/tokens/999999"), 404, "token_id")
    assert_problem(admin.delete("/api/v1/tokens/abc"), 404, "token_id")
    assert_problem(
        admin.post("/api/v1/tokens", {"name": "x", "username": "nobody"}, format="json"), 404
    )


@pytest.mark.parametrize(
    ("body", "field", "rule"),
    [
        ({}, "name", "required"),
        ({"name": ""}, "name", "blank"),
        ({"name": "x" * 101}, "name", "max_length"),
        ({"name": "x", "expires": -1}, "expires", "range"),
        ({"name": "x", "expires": 1000}, "expires", "past"),
        ({"name": "x", "expires": "soon"}, "expires", "type"),
        ({"name": "x", "colour": "red"}, "colour", None),
    ],
)
def test_bad_token_requests_are_400_naming_the_field(
    viewer: APIClient, body: dict[str, Any], field: str, rule: str | None
) -> None:
    assert_problem(viewer.post("/api/v1/tokens", body, format="json"), 400, field, rule)


# -- logins -----------------------------------------------------------------------------------


@pytest.fixture
def policy(settings: Any) -> Callable[..., None]:
    def set_policy(**values: int) -> None:
        settings.CAIRN_ACCOUNTS = {**settings.CAIRN_ACCOUNTS, **values}

    return set_policy


def api_login(username: str, password: str, address: str = "10.1.1.1") -> Any:
    return APIClient(REMOTE_ADDR=address).post(
        "/api/v1/auth/login", {"username": username, "password": password}, format="json"
    )


def console_login(username: str, password: str, address: str = "10.1.1.1") -> Any:
    return Client(REMOTE_ADDR=address).post("/login/", {"username": username, "password": password})


@pytest.mark.parametrize("login", [api_login, console_login], ids=["api", "console"])
def test_repeated_failures_lock_the_user_out_until_an_admin_lifts_it(
    login: Callable[..., Any],
    policy: Callable[..., None],
    make_user: Callable[..., Any],
    admin: APIClient,
) -> None:
    policy(THROTTLE_AFTER=0, LOCKOUT_AFTER=3, LOCKOUT_SECONDS=0)
    make_user("lee", "viewer")  # password pw-lee
    front_end = "rest" if login is api_login else "console"
    for _ in range(3):
        assert login("lee", "wrong").status_code in (200, 401)  # console: the form again
    locked = login("lee", "pw-lee")
    assert locked.status_code == 429
    if login is api_login:
        assert int(locked["Retry-After"]) > 0
        assert_problem(locked, 429, rule="throttled")
    else:
        assert b"locked after repeated failed logins" in locked.content
    user = admin.get("/api/v1/users/lee").json()
    assert user["failed_logins"] == 3 and user["locked_until"] is not None
    r = admin.post("/api/v1/users/lee/unlock", {"address": "10.1.1.1"}, format="json")
    assert r.status_code == 200 and r.json()["cleared"]["user"]["failures"] == 3
    ok = login("lee", "pw-lee")
    assert ok.status_code == (200 if login is api_login else 302)
    actions = list(
        AuditEntry.objects.filter(target="lee", action__startswith="login")
        .order_by("id")
        .values_list("action", "front_end")
    )
    assert actions == [
        ("login.failed", front_end),
        ("login.failed", front_end),
        ("login.failed", front_end),
        ("login.lockout", front_end),
        ("login.failed", front_end),  # the right password, refused while locked
        ("login.unlock", "rest"),
        ("login", front_end),
    ]
    failed = AuditEntry.objects.filter(target="lee", action="login.failed").first()
    assert failed is not None and failed.remote_addr == "10.1.1.1"
    assert failed.principal == "User:lee"


def test_failures_throttle_the_user_with_a_growing_wait(
    policy: Callable[..., None], make_user: Callable[..., Any]
) -> None:
    policy(THROTTLE_AFTER=2, LOCKOUT_AFTER=0)
    make_user("kim", "viewer")
    assert api_login("kim", "wrong").status_code == 401
    assert api_login("kim", "wrong").status_code == 401
    throttled = api_login("kim", "pw-kim")  # right, but too soon
    assert throttled.status_code == 429 and throttled["Retry-After"] == "1"
    time.sleep(1.05)
    assert api_login("kim", "pw-kim").status_code == 200
    # A success resets the count.
    assert api_login("kim", "wrong").status_code == 401
    assert api_login("kim", "pw-kim").status_code == 200


def test_failures_from_one_address_throttle_every_login_from_it(
    policy: Callable[..., None], make_user: Callable[..., Any], admin: APIClient
) -> None:
    policy(THROTTLE_AFTER=0, LOCKOUT_AFTER=0, ADDRESS_MAX_FAILURES=3)
    make_user("max", "viewer")
    for name in ("a", "b", "c"):  # unknown users count against the address too
        assert api_login(name, "guess", "10.6.6.6").status_code == 401
    assert api_login("max", "pw-max", "10.6.6.6").status_code == 429
    assert console_login("max", "pw-max", "10.6.6.6").status_code == 429
    assert api_login("max", "pw-max", "10.7.7.7").status_code == 200
    admin.post("/api/v1/users/max/unlock", {"address": "10.6.6.6"}, format="json")
    assert api_login("max", "pw-max", "10.6.6.6").status_code == 200


def test_unlock_input(admin: APIClient) -> None:
    assert_problem(admin.post("/api/v1/users/ghost/unlock"), 404, "username")
    assert_problem(
        admin.post("/api/v1/users/ada/unlock", {"address": "nowhere"}, format="json"),
        400,
        "address",
    )


def test_django_admin_is_gone(admin: APIClient, make_user: Callable[..., Any]) -> None:
    assert Client().get("/admin/").status_code == 404
    assert Client().get("/admin/login/").status_code == 404


def test_rest_changes_are_audited_with_principal_address_and_front_end(
    operator: APIClient,
) -> None:
    assert operator.post("/api/v1/topics", {"name": "audited"}, format="json").status_code == 201
    entry = AuditEntry.objects.get(action="topic.create", target="audited")
    assert (entry.principal, entry.front_end, entry.remote_addr) == (
        "User:otto",
        "rest",
        "127.0.0.1",
    )
    rows = operator.get("/api/v1/audit?front_end=rest").json()["results"]
    assert rows[0]["principal"] == "User:otto" and rows[0]["front_end"] == "rest"


def test_a_token_issued_by_an_admin_for_a_user_with_no_role_authenticates(
    admin: APIClient, make_user: Callable[..., Any]
) -> None:
    make_user("bare", None)
    text = admin.post("/api/v1/tokens", {"name": "k", "username": "bare"}, format="json").json()[
        "token"
    ]
    me = bearer(text).get("/api/v1/auth/me").json()
    assert me == {"authenticated": True, "username": "bare", "role": None}
