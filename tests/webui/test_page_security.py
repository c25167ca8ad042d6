"""Every console page under the Content-Security-Policy: the header is sent, and no page (nor
the fragments the overview refreshes) carries what the policy refuses: style attributes,
<style> or inline <script> elements, on* handlers, javascript: URLs. Pages are found by
following the console's own links from the overview, so a page added later is checked too.
And the no-JavaScript trace page shows only topics the user may read."""

from __future__ import annotations

from collections import deque
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
from django.test import Client

from mqcore.access.authorizer import Authorizer
from mqcore.access.model import (
    AclEntry,
    Operation,
    PatternType,
    Permission,
    Principal,
    ResourceType,
)
from mqcore.broker import Broker
from tests.webui.conftest import client_for, send

pytestmark = pytest.mark.django_db

SKIPPED = ("/logout/", "/download/", "/body/", "/static/", "/api/", "/stream/")


class InlineFinder(HTMLParser):
    """What a strict CSP refuses, and the page's links."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        for name, value in attrs:
            if name == "style":
                self.refused.append(f"<{tag} style={value!r}>")
            elif name.startswith("on"):
                self.refused.append(f"<{tag} {name}={value!r}>")
            elif (value or "").strip().lower().startswith("javascript:"):
                self.refused.append(f"<{tag} {name}={value!r}>")
        if tag == "style":
            self.refused.append("<style> element")
        if tag == "script" and "src" not in found and found.get("type") != "application/json":
            self.refused.append("inline <script>")
        if tag == "a" and found.get("href"):
            self.links.append(str(found["href"]))


def inline_refused(body: str) -> tuple[list[str], list[str]]:
    finder = InlineFinder()
    finder.feed(body)
    return finder.refused, finder.links


def check(response: Any, where: str) -> list[str]:
    """Assert the CSP header and a clean body; the page's links."""
    policy = response["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "style-src 'self'" in policy, where
    assert "frame-ancestors 'none'" in policy and "'unsafe-inline'" not in policy, where
    refused, links = inline_refused(response.content.decode())
    assert refused == [], (where, refused)
    return links


@pytest.fixture
def stocked(broker: Broker) -> Broker:
    broker.admin.create_topic("Orders", read_queue_nums=2)
    broker.admin.create_group("billing")
    sent = [send(broker, "Orders", b'{"n": 1}', keys=(f"order-{n}",)) for n in range(3)]
    broker.store.dispatch_until_caught_up()
    broker.commit_offset("billing", "Orders", sent[0].queue_id, 0)
    broker.store.health.set_condition("rebuilding", "rebuild:cq", "Rebuilding", progress=0.4)
    return broker


def test_every_console_page_is_under_the_csp_and_has_nothing_inline(
    stocked: Broker, admin: Any
) -> None:
    client = client_for(admin)
    seen: set[str] = set()
    queue = deque(["/"])
    while queue and len(seen) < 120:
        url = queue.popleft()
        if url in seen:
            continue
        seen.add(url)
        response = client.get(url)
        assert response.status_code in (200, 404), (url, response.status_code)
        if not response.get("Content-Type", "").startswith("text/html"):
            continue
        for link in check(response, url):
            target = urljoin(url, link)
            parts = urlsplit(target)
            if parts.netloc or any(s in parts.path for s in SKIPPED):
                continue
            queue.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    print(f"\n{len(seen)} console pages checked")
    for must in ("/topics/Orders/", "/groups/billing/", "/groups/billing/reset/", "/trace/"):
        assert must in seen, sorted(seen)
    assert any(u.startswith("/messages/") and len(u) > 20 for u in seen), sorted(seen)

    # Pages reached otherwise: searches, forms with errors, previews, fragments, errors.
    extra_get = (
        "/messages/?mode=key&key=order-1&begin=&end=",
        "/trace/?key=order-1&begin_ms=0",
        "/?partial=health",
        "/topics/Nope/",
        "/groups/billing/reset/?topic=Orders",
        "/topics/new/",
        "/groups/new/",
    )
    for url in extra_get:
        check(client.get(url), url)
    for url, data in (
        ("/topics/Orders/send/", {"body": "", "body_encoding": "json", "keys": "k"}),
        ("/groups/billing/reset/", {"topic": "Orders", "to": "earliest", "action": "preview"}),
        ("/topics/new/", {"name": "bad name!"}),
    ):
        check(client.post(url, data), url)
    anonymous = Client()
    check(anonymous.get("/login/"), "/login/")
    check(anonymous.post("/login/", {"username": "x", "password": "y"}), "login error")


def test_refused_and_unavailable_pages_too(broker: Broker, viewer: Any) -> None:
    client = client_for(viewer)
    refused = client.get("/topics/new/")
    assert refused.status_code == 403
    check(refused, "refused")
    from cairn import runtime

    runtime.reset()
    down = client.get("/topics/")
    assert down.status_code == 503
    check(down, "unavailable")


def test_the_api_docs_page_has_nothing_inline(db: None) -> None:
    response = Client().get("/api/v1/docs")
    assert response.status_code == 200
    check(response, "api docs")
    assert "/static/api/docs.css" in response.content.decode()


def test_the_scanner_finds_what_the_csp_refuses() -> None:
    refused, _ = inline_refused(
        '<div style="color:red"></div><input onchange="go()"><a href=" JavaScript:x()">x</a>'
        '<style>p{}</style><script>alert(1)</script><script src="/s.js"></script>'
        '<script type="application/json">{}</script>'
    )
    assert len(refused) == 5, refused


# -- the no-JavaScript trace page: readable topics only ----------------------------------------


def test_trace_page_shows_only_readable_topics(
    stocked: Broker, viewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stocked.admin.create_topic("Payroll", read_queue_nums=1)
    send(stocked, "Payroll", b"salary", keys=("order-1",))
    stocked.store.dispatch_until_caught_up()
    client = client_for(viewer)
    page = client.get("/trace/?key=order-1&begin_ms=0").content.decode()
    assert page.count('class="trace-item"') == 2 and ">Payroll</option>" in page

    deny = AclEntry(
        Principal("Role", "viewer"),
        ResourceType.TOPIC,
        "Payroll",
        PatternType.LITERAL,
        Operation.READ,
        Permission.DENY,
    )
    monkeypatch.setattr("webui.access.authorizer", lambda: Authorizer([deny], 1))
    page = client.get("/trace/?key=order-1&begin_ms=0").content.decode()
    assert page.count('class="trace-item"') == 1 and "Payroll" not in page
    refused = client.get("/trace/?key=order-1&topic=Payroll&begin_ms=0").content.decode()
    assert "you may not read topic Payroll" in refused
    assert 'class="trace-item"' not in refused and '"autostart": false' in refused
