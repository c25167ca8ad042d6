"""The console's account pages: users (admins), API tokens (everyone's own; admins anyone's),
ACL entries (admins). Every change goes through ``accounts.service`` and is audited with
front end ``console``; an ACL entry added here changes what the user sees at once."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.models import AclRecord, ApiToken, AuditEntry
from accounts.roles import role_of
from mqcore.broker import Broker
from tests.webui.conftest import PASSWORD, client_for, make_user

pytestmark = pytest.mark.django_db


def html(response: Any) -> str:
    return response.content.decode()


def audited(action: str) -> AuditEntry:
    entry = AuditEntry.objects.filter(action=action).latest("id")
    assert entry.front_end == "console", entry.front_end
    return entry


def user(username: str) -> Any:
    return get_user_model().objects.get(username=username)


def test_account_pages_and_links_are_for_who_may_use_them(
    broker: Broker, operator: Any, admin: Any
) -> None:
    page = html(client_for(operator).get("/"))
    assert (
        'href="/tokens/"' in page and 'href="/users/"' not in page and 'href="/acls/"' not in page
    )
    for url in ("/users/", "/users/new/", "/users/otto/", "/acls/", "/acls/1/delete/"):
        refused = client_for(operator).get(url)
        assert refused.status_code == 403 and "needs the admin role" in html(refused), url
    assert client_for(operator).post("/users/new/", {"username": "x"}).status_code == 403
    assert not get_user_model().objects.filter(username="x").exists()
    page = html(client_for(admin).get("/"))
    assert 'href="/users/"' in page and 'href="/acls/"' in page
    # A user with no role and no entries may still manage its own tokens, nothing else.
    nobody = client_for(make_user("svc", None))
    assert nobody.get("/tokens/").status_code == 200
    assert nobody.get("/topics/").status_code == 403


def test_admin_creates_users(broker: Broker, admin: Any) -> None:
    client = client_for(admin)
    listing = html(client.get("/users/"))
    assert "ada" in listing and "New user" in listing
    made = client.post(
        "/users/new/", {"username": "bob", "role": "operator", "password_mode": "generate", "active": "on"}
    )  # fmt: skip
    assert made.status_code == 200 and made["Cache-Control"].startswith("no-store")
    password = re.search(r'data-testid="shown-password">([^<]+)<', html(made))
    assert password is not None and len(password.group(1)) >= 16
    assert role_of(user("bob")) == "operator"
    assert audited("user.create").new_value == {"role": "operator", "is_active": True}
    assert Client().login(username="bob", password=password.group(1))

    typed = client.post(
        "/users/new/", {"username": "svc", "role": "", "password_mode": "type", "password": "long enough pw"}
    )  # fmt: skip
    assert typed.status_code == 302 and typed["Location"] == "/users/svc/"
    assert role_of(user("svc")) is None and not user("svc").is_active  # "active" unticked
    tokens_only = client.post(
        "/users/new/",
        {"username": "bot", "role": "viewer", "password_mode": "none", "active": "on"},
    )
    assert tokens_only.status_code == 302 and not user("bot").has_usable_password()

    for data, field, message in (
        ({"username": "bad name!", "role": "viewer"}, "username", "valid"),
        ({"username": "bob", "role": "viewer"}, "__all__", "exists"),
        ({"username": "carl", "role": "king"}, "role", "valid choice"),
        ({"username": "carl", "role": "viewer", "password_mode": "type", "password": "short"}, "password", "8"),
        ({"username": "carl", "role": "viewer", "password_mode": "type"}, "password", "type a password"),
    ):  # fmt: skip
        refused = client.post("/users/new/", data)
        body = html(refused)
        assert refused.status_code == 400, data
        assert 'class="form-error"' in body and message in body, (data, body[-3000:])
        if field != "__all__":
            assert f"<strong>{field}</strong>" in body, (field, data)
    assert not get_user_model().objects.filter(username="carl").exists()
    assert AuditEntry.objects.filter(action="user.create").count() == 3


def test_admin_changes_role_state_password_and_lifts_a_lockout(
    broker: Broker, admin: Any, viewer: Any, settings: Any
) -> None:
    client = client_for(admin)
    page = html(client.get("/users/vera/"))
    assert "Save role" in page and "Disable" in page and "Lift lockout" not in page
    assert client.post("/users/vera/", {"action": "role", "role": "operator"}).status_code == 302
    assert role_of(user("vera")) == "operator"
    assert audited("user.role").old_value["role"] == "viewer"
    assert client.post("/users/vera/", {"action": "role", "role": ""}).status_code == 302
    assert role_of(user("vera")) is None
    assert client.post("/users/vera/", {"action": "disable"}).status_code == 302
    assert not user("vera").is_active and audited("user.disable")
    assert not Client().login(username="vera", password=PASSWORD)
    assert client.post("/users/vera/", {"action": "enable"}).status_code == 302
    assert user("vera").is_active and audited("user.enable")
    own = client.post("/users/ada/", {"action": "disable"})
    assert own.status_code == 400 and "cannot disable your own account" in html(own)
    assert "Disable" not in html(client.get("/users/ada/"))

    typed = client.post(
        "/users/vera/",
        {"action": "password", "password_mode": "type", "password": "a new password"},
    )
    assert typed.status_code == 302 and Client().login(username="vera", password="a new password")
    assert audited("user.password").new_value == {"password": "changed"}
    short = client.post(
        "/users/vera/", {"action": "password", "password_mode": "type", "password": "x"}
    )
    assert short.status_code == 400 and "8" in html(short)
    generated = client.post("/users/vera/", {"action": "password", "password_mode": "generate"})
    shown = re.search(r'data-testid="shown-password">([^<]+)<', html(generated))
    assert shown is not None and Client().login(username="vera", password=shown.group(1))

    # Lock vera out through the console's login, then lift it.
    settings.CAIRN_ACCOUNTS = {**settings.CAIRN_ACCOUNTS, "LOCKOUT_AFTER": 3, "THROTTLE_AFTER": 0}
    for _ in range(3):
        Client().post("/login/", {"username": "vera", "password": "wrong"})
    listing = html(client.get("/users/"))
    assert "locked out" in listing
    assert "Lift lockout" in html(client.get("/users/vera/"))
    assert client.post("/users/vera/", {"action": "unlock"}).status_code == 302
    assert audited("login.unlock").target == "vera"
    assert "locked out" not in html(client.get("/users/"))
    assert client.get("/users/nobody/").status_code == 404
    assert client.post("/users/vera/", {"action": "explode"}).status_code == 400


def test_every_user_manages_its_own_tokens(broker: Broker, viewer: Any, admin: Any) -> None:
    client = client_for(viewer)
    issued = client.post("/tokens/", {"name": "billing-service", "expires": ""})
    assert issued.status_code == 200 and issued["Cache-Control"].startswith("no-store")
    text = re.search(r'data-testid="token-text">([^<]+)<', html(issued))
    assert text is not None
    token = text.group(1)
    assert f'data-copy="{token}"' in html(issued)
    assert audited("token.issue").target == "vera"
    me = Client().get("/api/v1/auth/me", HTTP_AUTHORIZATION=f"Token {token}")
    assert me.status_code == 200 and me.json()["username"] == "vera"
    again = html(client.get("/tokens/"))
    assert "billing-service" in again and token not in again  # shown once
    (row,) = ApiToken.objects.filter(user=user("vera"))
    assert row.digest != token and token not in str(row.__dict__)

    # Someone else's tokens: refused to a non-admin, managed by an admin.
    refused = client.get("/tokens/?user=ada")
    assert refused.status_code == 403 and "only admins" in html(refused)
    assert client.post("/tokens/", {"user": "ada", "name": "x"}).status_code == 403
    admins = client_for(admin)
    assert "billing-service" in html(admins.get("/tokens/?user=vera"))
    for_vera = admins.post(
        "/tokens/", {"user": "vera", "name": "from-admin", "expires_ms": "4102444800000"}
    )
    assert for_vera.status_code == 200 and ApiToken.objects.get(name="from-admin").user == user(
        "vera"
    )
    admin_token = ApiToken.objects.create(user=admin, name="ada-only", digest="0" * 64)
    assert client.post(f"/tokens/{admin_token.pk}/revoke/").status_code == 404

    for data, message in (
        ({"name": ""}, "name"),
        ({"name": "old", "expires_ms": "1000"}, "future"),
        ({"name": "bad", "expires": "not a time"}, "not a valid time"),
    ):
        bad = client.post("/tokens/", data)
        assert bad.status_code == 400 and message in html(bad), data

    revoked = client.post(f"/tokens/{row.pk}/revoke/")
    assert revoked.status_code == 302 and revoked["Location"] == "/tokens/"
    assert audited("token.revoke").target == "vera"
    gone = Client().get("/api/v1/auth/me", HTTP_AUTHORIZATION=f"Token {token}")
    assert gone.status_code == 401
    assert ">revoked<" in html(client.get("/tokens/"))


def test_admin_adds_filters_and_deletes_acl_entries(broker: Broker, admin: Any) -> None:
    client = client_for(admin)
    assert "No ACL entries" in html(client.get("/acls/"))
    entry = {
        "principal": "User:svc", "permission": "allow", "operation": "write",
        "resource_type": "topic", "pattern_type": "prefixed", "resource_name": "orders-", "host": "*",
    }  # fmt: skip
    added = client.post("/acls/", entry)
    assert added.status_code == 302
    assert audited("acl.create").new_value["resource_name"] == "orders-"
    client.post(
        "/acls/", {**entry, "principal": "Role:viewer", "permission": "deny", "operation": "read"}
    )
    page = html(client.get("/acls/"))
    assert page.count("Delete…") == 2 and "User:svc" in page and "Role:viewer" in page
    only_deny = html(client.get("/acls/?permission=deny"))
    assert "Role:viewer" in only_deny and '<td class="mono">User:svc' not in only_deny
    matching = html(client.get("/acls/?resource_name=orders-eu&pattern_type=match"))
    assert matching.count("Delete…") == 2
    bad_filter = client.get("/acls/?principal=nobody")
    assert bad_filter.status_code == 400 and "User:&lt;name&gt;" in html(bad_filter)

    for change, field in (
        ({"principal": "svc"}, "principal"),
        ({"operation": "fly"}, "operation"),
        ({"resource_name": ""}, "resource_name"),
        ({"resource_name": "*", "pattern_type": "prefixed"}, "resource_name"),
    ):
        refused = client.post("/acls/", {**entry, **change})
        assert refused.status_code == 400 and f"<strong>{field}</strong>" in html(refused), change
    assert AclRecord.objects.count() == 2

    pk = AclRecord.objects.get(principal="User:svc").pk
    confirm = client.get(f"/acls/{pk}/delete/")
    assert confirm.status_code == 200 and "Allow User:svc to write topic orders-*" in html(confirm)
    assert client.post(f"/acls/{pk}/delete/").status_code == 302
    assert not AclRecord.objects.filter(pk=pk).exists()
    assert audited("acl.delete").old_value["principal"] == "User:svc"
    assert client.get(f"/acls/{pk}/delete/").status_code == 404


def test_an_entry_added_in_the_console_changes_the_users_view_at_once(
    broker: Broker, admin: Any
) -> None:
    for topic in ("orders-eu", "billing"):
        broker.admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    svc = client_for(make_user("svc", None))
    assert svc.get("/topics/").status_code == 403
    client_for(admin).post(
        "/acls/",
        {"principal": "User:svc", "permission": "allow", "operation": "read",
         "resource_type": "topic", "pattern_type": "prefixed", "resource_name": "orders-"},
    )  # fmt: skip
    topics = html(svc.get("/topics/"))
    assert "orders-eu" in topics and ">billing<" not in topics
    client_for(admin).post(
        "/acls/",
        {"principal": "User:svc", "permission": "deny", "operation": "all",
         "resource_type": "topic", "pattern_type": "literal", "resource_name": "orders-eu"},
    )  # fmt: skip
    assert "orders-eu" not in html(svc.get("/topics/"))


def test_account_pages_are_under_the_csp_with_nothing_inline(broker: Broker, admin: Any) -> None:
    from tests.webui.test_page_security import check

    client = client_for(admin)
    make_user("vera", "viewer")
    client.post("/acls/", {"principal": "User:vera", "permission": "allow", "operation": "read",
                           "resource_type": "topic", "resource_name": "x"})  # fmt: skip
    pk = AclRecord.objects.get().pk
    for url in ("/users/", "/users/new/", "/users/vera/", "/tokens/", "/tokens/?user=vera",
                "/acls/", f"/acls/{pk}/delete/", "/acls/?principal=bad"):  # fmt: skip
        check(client.get(url), url)
    for url, data in (
        ("/users/new/", {"username": "bob", "role": "viewer", "password_mode": "generate"}),
        ("/users/new/", {"username": "bad name!"}),
        ("/users/vera/", {"action": "password", "password_mode": "generate"}),
        ("/users/vera/", {"action": "password", "password_mode": "type", "password": "x"}),
        ("/tokens/", {"name": "t"}),
        ("/tokens/", {"name": ""}),
        ("/acls/", {"principal": "nope"}),
    ):
        check(client.post(url, data), url)


def test_account_forms_need_the_csrf_token(broker: Broker, admin: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin)
    for url, data in (
        ("/users/new/", {"username": "bob", "role": "viewer", "password_mode": "generate"}),
        ("/tokens/", {"name": "t"}),
        (
            "/acls/",
            {
                "principal": "User:x",
                "operation": "read",
                "permission": "allow",
                "resource_type": "topic",
                "resource_name": "x",
            },
        ),  # fmt: skip
    ):
        assert client.post(url, data).status_code == 403, url
    assert not get_user_model().objects.filter(username="bob").exists()
    assert not ApiToken.objects.exists() and not AclRecord.objects.exists()
    form = client.get("/tokens/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html(form))
    assert token is not None
    issued = client.post("/tokens/", {"name": "t", "csrfmiddlewaretoken": token.group(1)})
    assert issued.status_code == 200 and ApiToken.objects.count() == 1


def test_odd_input_gets_a_clear_answer_never_a_500(broker: Broker, admin: Any) -> None:
    client = client_for(admin)
    huge = "9" * 30
    for url, status in (
        (f"/tokens/{huge}/revoke/", 404),
        (f"/acls/{huge}/delete/", 404),
        ("/tokens/?user=nobody", 404),
        ("/users/%00/", 404),
        ("/acls/?resource_name=" + "x" * 300, 400),
        ("/acls/?pattern_type=match", 400),
        ("/acls/?operation=fly", 400),
    ):
        assert client.get(url).status_code == status, url
    assert client.post(f"/tokens/{huge}/revoke/").status_code == 404
    for data in (
        {"name": "t", "expires_ms": str(2**61)},
        {"name": "t", "expires_ms": "-5"},
        {"name": "t", "expires": "99999-01-01T00:00"},
        {"name": "x" * 101},
    ):
        assert client.post("/tokens/", data).status_code == 400, data
    assert client.post("/users/new/", {"username": "u" * 151, "role": "viewer"}).status_code == 400
    assert client.post("/users/nobody/", {"action": "unlock"}).status_code == 404
    assert not ApiToken.objects.exists()
