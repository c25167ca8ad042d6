"""Accounts in a real browser over HTTPS: an admin creates a user with no role, issues it an
API token (shown once, copied with the button), adds an ACL entry for it, and the user's own
console changes at once: refused before the entry, its topics only after it."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.e2e.conftest import Server, log_in, new_context, shot

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SERVICE_PASSWORD = "e2e-service-password"


def whoami(server: Server, token: str) -> Any:
    request = urllib.request.Request(
        f"{server.base}/api/v1/auth/me", headers={"Authorization": f"Token {token}"}
    )
    with urllib.request.urlopen(request, timeout=10, context=server.tls) as response:
        return json.loads(response.read())


def test_admin_creates_a_user_a_token_and_an_acl_and_the_users_view_changes(
    server: Server, browser: Any
) -> None:
    from playwright.sync_api import expect

    base = server.base
    for topic in ("acl-orders-eu", "acl-other"):
        server.api("POST", "/topics", {"name": topic, "read_queue_nums": 1, "write_queue_nums": 1})
    errors: list[str] = []
    admin_context = new_context(
        browser,
        viewport={"width": 1360, "height": 900},
        permissions=["clipboard-read", "clipboard-write"],
    )
    admin = admin_context.new_page()
    admin.on("pageerror", lambda exc: errors.append(str(exc)))
    admin.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    log_in(admin, base)

    # A user with no role and a typed password.
    admin.get_by_role("link", name="Users", exact=True).click()
    expect(admin.get_by_test_id("users-table")).to_contain_text("ops")
    admin.get_by_role("link", name="New user").click()
    admin.fill("#u-name", "svc-e2e")
    admin.select_option("#u-role", "")
    admin.check("input[name=password_mode][value=type]")
    admin.fill("#u-password", SERVICE_PASSWORD)
    shot(admin, "20-user-new")
    admin.get_by_role("button", name="Create user").click()
    expect(admin).to_have_url(base + "/users/svc-e2e/")
    expect(admin.locator(".flash-success")).to_contain_text("User svc-e2e created")

    # The user, logged in elsewhere, has no console role yet.
    user_context = new_context(browser, viewport={"width": 1360, "height": 900})
    user = user_context.new_page()
    user.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(user, base, "svc-e2e", SERVICE_PASSWORD)
    expect(user.get_by_text("Your account has no console role")).to_be_visible()

    # A token for it: shown once, copied with the button, and it works.
    admin.get_by_role("link", name="API tokens", exact=True).click()
    expect(admin).to_have_url(re.compile(r"/tokens/\?user=svc-e2e$"))
    admin.fill("#t-name", "e2e-bot")
    admin.get_by_role("button", name="Issue token").click()
    token = admin.get_by_test_id("token-text").inner_text().strip()
    assert len(token) >= 40
    shot(admin, "21-token-issued")
    admin.get_by_role("button", name="Copy").click()
    expect(admin.get_by_role("button", name="copied")).to_be_visible()
    assert admin.evaluate("navigator.clipboard.readText()") == token
    assert whoami(server, token)["username"] == "svc-e2e"
    admin.goto(base + "/tokens/?user=svc-e2e")
    expect(admin.get_by_test_id("tokens-table")).to_contain_text("e2e-bot")
    assert token not in admin.content()

    # An ACL entry: svc-e2e may read the acl-orders-* topics.
    admin.get_by_role("link", name="ACLs", exact=True).click()
    admin.fill("#a-principal", "User:svc-e2e")
    admin.select_option("#a-op", "read")
    admin.select_option("#a-pattern", "prefixed")
    admin.fill("#a-rname", "acl-orders-")
    admin.get_by_role("button", name="Add entry").click()
    expect(admin.locator(".flash-success")).to_contain_text(
        "allow User:svc-e2e to read topic acl-orders-*"
    )
    expect(admin.get_by_test_id("acls-table")).to_contain_text("User:svc-e2e")
    shot(admin, "22-acls")

    # The user's console now shows exactly those topics; the other one is refused.
    user.goto(base + "/topics/")
    expect(user.get_by_role("link", name="acl-orders-eu")).to_be_visible()
    expect(user.get_by_role("link", name="acl-other")).to_have_count(0)
    expect(user.get_by_role("link", name="Users", exact=True)).to_have_count(0)
    shot(user, "23-user-topics")
    response = user.goto(base + "/topics/acl-other/")
    assert response is not None and response.status == 403
    expect(user.get_by_test_id("refused")).to_contain_text("describe on topic acl-other")

    # Deleting the entry takes it away again.
    admin.get_by_role("link", name="Delete…").click()
    admin.get_by_role("button", name="Delete entry").click()
    expect(admin.locator(".flash-success")).to_contain_text("ACL entry deleted")
    user.goto(base + "/topics/")
    expect(user.get_by_text("Your account has no console role")).to_be_visible()

    audit = server.get(
        "/api/v1/audit?front_end=console&username=ops&limit=100", token=server.admin_token
    )
    actions = {e["action"] for e in audit["results"]}
    assert {"user.create", "token.issue", "acl.create", "acl.delete"} <= actions, actions
    try:
        urllib.request.urlopen(
            urllib.request.Request(f"{base}/api/v1/topics/acl-other", headers={
                "Authorization": f"Token {token}"}), timeout=10, context=server.tls
        )  # fmt: skip
    except urllib.error.HTTPError as exc:
        assert exc.code == 403
    else:
        raise AssertionError("the token's user read a topic no entry allows it")
    user_context.close()
    admin_context.close()
    assert not errors, errors
