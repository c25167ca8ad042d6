"""The console in a real browser against a real broker: log in, create a topic, send from the
page, find the message by key, open it, reset a group's offsets with a preview, follow a key
live while the REST API sends, survive a dropped socket; a viewer sees no mutate buttons; a
store problem shows on the overview until acknowledged. Every page is saved under test-output/screenshots/."""

from __future__ import annotations

import re
import statistics
import time
from collections import deque
from typing import Any

import pytest

from mqcore.store.health import StoreHealth
from tests.e2e.conftest import PASSWORD, Server, log_in, new_context, shot

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def page(browser: Any) -> Any:
    context = new_context(browser, viewport={"width": 1360, "height": 900}, color_scheme="light")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    context.close()
    assert not errors, errors


def test_console_walkthrough(server: Server, page: Any) -> None:
    from playwright.sync_api import expect

    base = server.base
    page.goto(base + "/topics/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/topics/"))
    shot(page, "01-login")
    log_in(page, base)
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()

    # Create a topic from the form.
    page.goto(base + "/topics/")
    expect(page.get_by_text("No topics yet")).to_be_visible()
    page.get_by_role("link", name="New topic").click()
    page.fill("#f-name", "Orders")
    page.fill("#f-read", "4")
    page.fill("#f-write", "4")
    shot(page, "03-topic-new")
    page.get_by_role("button", name="Create topic").click()
    expect(page).to_have_url(base + "/topics/Orders/")
    expect(page.locator(".flash-success")).to_contain_text("Topic Orders created")

    # Send a message from the page.
    page.fill("#s-keys", "order-42")
    page.fill("#s-tag", "created")
    page.fill("#s-body", '{"order": 42, "state": "created", "lines": [{"sku": "A1", "qty": 3}]}')
    page.check("input[name=body_encoding][value=json]")
    page.fill("#s-props", "tenant=acme\nsource=console")
    page.get_by_role("button", name="Send message").click()
    flash = page.locator(".flash-success")
    expect(flash).to_contain_text("Sent")
    msg_id = flash.locator("a").inner_text().strip()
    assert re.fullmatch(r"[0-9A-F]{32}", msg_id)
    expect(page.locator("#queues")).to_contain_text("1")
    shot(page, "04-topic")

    # Find it by key: results stream into the table.
    page.goto(base + "/messages/")
    page.fill("#k-key", "order-42")
    page.locator("form[data-mode=key]").get_by_role("button", name="Search").click()
    results = page.locator("#results-table tbody tr")
    expect(results).to_have_count(1)
    expect(page.locator('[data-role="state"]')).to_contain_text("complete")
    expect(results.first).to_contain_text(msg_id)
    shot(page, "05-messages")

    # Open its detail: body, properties, consume status.
    results.first.locator("a.id").click()
    expect(page.locator("h1")).to_contain_text(msg_id)
    expect(page.locator('[data-testid="body-json"]')).to_be_visible()
    expect(page.locator('[data-testid="body-json"]')).to_contain_text('"sku": "A1"')
    page.get_by_role("tab", name="Hex").click()
    expect(page.locator('[data-testid="body-hex"]')).to_be_visible()
    expect(page.locator('[data-testid="body-json"]')).to_be_hidden()
    page.get_by_role("tab", name="Pretty JSON").click()
    expect(page.locator('[data-testid="user-properties"]')).to_contain_text("acme")
    expect(page.locator('[data-testid="system-properties"]')).to_contain_text("UNIQ_KEY")
    time_el = page.locator("time[data-ms]").first
    assert re.fullmatch(r"epoch ms \d{13}.*", time_el.get_attribute("title") or "", re.S) or (
        "epoch ms" in (time_el.get_attribute("title") or "")
    )
    shot(page, "06-message")

    # A group with a backlog, then an offset reset with a preview.
    page.goto(base + "/groups/new/")
    page.fill("#f-name", "billing")
    page.get_by_role("button", name="Create group").click()
    expect(page).to_have_url(base + "/groups/billing/")
    for n in range(6):
        server.api(
            "POST",
            "/topics/Orders/messages",
            {"messages": [{"body": f"backlog {n}", "keys": [f"bulk-{n}"], "tag": "bulk"}]},
        )
    offsets = [{"topic": "Orders", "queue_id": q, "offset": 1} for q in range(4)]
    server.api("PUT", "/groups/billing/offsets", {"offsets": offsets})
    page.reload()
    expect(page.locator(".page-head .sub")).to_contain_text("messages behind")
    shot(page, "07-group")
    page.get_by_role("link", name="Reset offsets…").click()
    page.locator("label", has_text="Earliest").click()
    page.get_by_role("button", name="Preview (dry run)").click()
    preview = page.locator('[data-testid="reset-preview"] tbody tr')
    expect(preview).to_have_count(4)
    shot(page, "08-reset-preview")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Apply reset").click()
    expect(page.locator(".flash-success")).to_contain_text("reset")
    expect(page).to_have_url(base + "/groups/billing/")

    # Overview, config, audit.
    page.goto(base + "/")
    expect(page.locator('[data-testid="put-tps"]')).to_be_visible()
    page.wait_for_timeout(300)
    shot(page, "02-overview")
    page.goto(base + "/config/")
    page.get_by_text("View the document").first.click()
    expect(page.locator('[data-testid="doc-topics.json"]')).to_contain_text("Orders")
    shot(page, "10-config")
    page.goto(base + "/audit/")
    audit = page.locator('[data-testid="audit-table"]')
    for action in ("topic.create", "message.send", "group.create", "group.offsets.reset"):
        expect(audit).to_contain_text(action)
    shot(page, "11-audit")

    # Dark theme through the toggle (auto on a light system → dark), kept across pages.
    page.goto(base + "/")
    page.click("#theme-toggle")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    page.goto(base + "/topics/Orders/")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    shot(page, "12-topic-dark")
    page.goto(base + "/")
    page.wait_for_timeout(300)
    shot(page, "12-overview-dark")


def test_live_trace_follows_rest_sends(server: Server, page: Any) -> None:
    """Stored matches first, then messages sent through the REST API appear live; the figure
    measured is the time from the REST call to the card in the page."""
    from playwright.sync_api import expect

    base = server.base
    server.api("POST", "/topics", {"name": "Trace", "read_queue_nums": 2, "write_queue_nums": 2})
    stored = server.api(
        "POST", "/topics/Trace/messages", {"messages": [{"body": "before", "keys": ["cust-1"]}]}
    )
    log_in(page, base)
    page.goto(base + "/trace/")
    page.fill("#tr-key", "cust-1")
    page.select_option("#tr-topic", "Trace")
    page.get_by_role("button", name="15 min ago").click()
    page.get_by_role("button", name="Start trace").click()
    pill = page.locator('[data-role="pill"]')
    expect(pill).to_contain_text("Live")
    cards = page.locator("#trace-list .trace-item")
    expect(cards).to_have_count(1)
    expect(cards.first).to_contain_text(stored["results"][0]["msg_id"])

    figures: list[float] = []
    for n in range(8):
        started = time.time() * 1000
        result = server.api(
            "POST",
            "/topics/Trace/messages",
            {"messages": [{"body": f"live {n}", "keys": ["cust-1"]}]},
        )["results"][0]
        card = page.locator(f'.trace-item[data-offset-msg-id="{result["offset_msg_id"]}"]')
        expect(card).to_be_visible()
        received = page.evaluate(f"cairnTrace.received[{result['offset_msg_id']!r}]")
        figures.append(received - started)
        expect(card).to_contain_text("live ·")
    expect(cards).to_have_count(9)
    shot(page, "09-trace")
    median, worst = statistics.median(figures), max(figures)
    print(
        f"\nlive trace in the browser (REST send → card, loopback, n=8): median {median:.0f} ms, max {worst:.0f} ms"
    )
    assert median < 100, figures

    # The socket drops: the page says so, reconnects and keeps following.
    page.evaluate("cairnTrace.socket.close()")
    expect(pill).to_contain_text("retrying")
    expect(pill).to_contain_text("Live", timeout=10_000)
    assert page.evaluate("cairnTrace.connects") == 2
    after = server.api(
        "POST",
        "/topics/Trace/messages",
        {"messages": [{"body": "after reconnect", "keys": ["cust-1"]}]},
    )["results"][0]
    expect(
        page.locator(f'.trace-item[data-offset-msg-id="{after["offset_msg_id"]}"]')
    ).to_be_visible()
    expect(cards).to_have_count(10)


def test_viewer_sees_no_mutate_buttons(server: Server, browser: Any) -> None:
    from playwright.sync_api import expect

    base = server.base
    server.api(
        "POST",
        "/users",
        {"username": "vera", "password": PASSWORD, "role": "viewer"},
        token=server.admin_token,
    )
    server.api("POST", "/topics", {"name": "Seen", "read_queue_nums": 1, "write_queue_nums": 1})
    context = new_context(browser, viewport={"width": 1360, "height": 900})
    page = context.new_page()
    log_in(page, base, "vera")
    page.goto(base + "/topics/")
    expect(page.get_by_role("link", name="New topic")).to_have_count(0)
    page.goto(base + "/topics/Seen/")
    expect(page.get_by_role("button", name="Send message")).to_have_count(0)
    expect(page.get_by_role("link", name="Edit")).to_have_count(0)
    expect(page.locator(".badge.role-viewer")).to_have_text("viewer")
    shot(page, "13-viewer-topic")
    response = page.goto(base + "/topics/new/")
    assert response is not None and response.status == 403
    expect(page.get_by_text("This needs the operator role")).to_be_visible()
    context.close()

    # A phone-sized screen: the same pages reflow.
    phone = new_context(browser, viewport={"width": 390, "height": 844}, device_scale_factor=2)
    page = phone.new_page()
    log_in(page, base, "vera")
    page.goto(base + "/trace/?key=cust-1&begin_ms=0")
    expect(page.locator('[data-role="pill"]')).to_contain_text("Live")
    shot(page, "14-trace-phone", full_page=False)
    phone.close()


def test_a_reported_store_problem_is_shown_and_acknowledged(server: Server, page: Any) -> None:
    """Another process (as an offline tool would) reports a problem into the broker's store:
    the open overview shows the banner at its next refresh, the details stay open across
    refreshes, and Acknowledge clears it everywhere (/healthz, status, audit log)."""
    from playwright.sync_api import expect

    base = server.base
    log_in(page, base)
    expect(page.locator('[data-testid="health-banner"]')).to_have_count(0)
    problem_id = "quarantine:00000000000000008192"
    reported = (
        StoreHealth(server.data_dir / "store")
        .load()
        .report(
            "quarantine",
            problem_id,
            "CommitLog bytes 8192..8448 failed their CRC and were quarantined",
            {"file": "00000000000000000000", "position": 8192, "length": 256, "reason": "body CRC"},
        )
    )
    healthz = server.get("/healthz")
    assert (healthz["status"], healthz["problems"]) == ("degraded", 1)

    banner = page.locator('[data-testid="health-banner"]')
    expect(banner).to_be_visible(timeout=10_000)  # the 5 s refresh, no reload
    item = banner.locator(f'[data-testid="health-problem"][data-id="{problem_id}"]')
    expect(item).to_contain_text("failed their CRC and were quarantined")
    seen = item.locator(f'time[data-ms="{reported.first_seen_ms}"]')
    expect(seen).to_have_count(2)  # when (in the browser's zone) and how long ago
    expect(seen.last).to_contain_text("ago")
    item.get_by_text("Details").click()
    expect(item.get_by_text("body CRC")).to_be_visible()
    page.wait_for_timeout(5_500)  # a refresh replaces the banner: the details stay open
    expect(item.get_by_text("body CRC")).to_be_visible()
    shot(page, "15-overview-degraded")

    item.get_by_role("button", name="Acknowledge").click()
    expect(page.locator(".flash-success")).to_contain_text("Acknowledged 1 problem")
    expect(banner).to_have_count(0)
    healthz = server.get("/healthz")
    assert (healthz["status"], healthz["problems"]) == ("ok", 0)
    status = server.api("GET", "/status")["health"]
    assert [(p["id"], p["acknowledged_by"]) for p in status["acknowledged"]] == [
        (problem_id, "ops")
    ]
    audit = server.api("GET", f"/audit?target={problem_id}", token=server.admin_token)
    assert [e["action"] for e in audit["results"]] == ["problem.acknowledge"]


def test_every_page_over_https_is_under_the_csp_without_violations(
    server: Server, page: Any
) -> None:
    """The console over HTTPS: Secure session and CSRF cookies, HSTS and the CSP on every page
    reachable from the overview's links, and no CSP violation on any of them (each is a
    console error, which the ``page`` fixture fails on)."""
    from playwright.sync_api import expect

    base = server.base
    server.api("POST", "/topics", {"name": "Crawl", "read_queue_nums": 1, "write_queue_nums": 1})
    server.api("POST", "/topics/Crawl/messages", {"messages": [{"body": "x", "keys": ["c-1"]}]})
    server.api("POST", "/groups", {"name": "crawler"})
    login = page.goto(base + "/login/")
    assert (
        login is not None and "frame-ancestors 'none'" in login.headers["content-security-policy"]
    )
    log_in(page, base)
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert cookies["sessionid"]["secure"] and cookies["sessionid"]["httpOnly"]
    assert cookies["csrftoken"]["secure"]

    seen: set[str] = set()
    queue = deque(["/"])
    while queue and len(seen) < 80:
        path = queue.popleft()
        if path in seen:
            continue
        seen.add(path)
        response = page.goto(base + path)
        assert response is not None and response.status in (200, 404), (path, response.status)
        headers = response.headers
        assert "script-src 'self'" in headers["content-security-policy"], path
        assert headers["strict-transport-security"] == "max-age=31536000", path
        page.wait_for_load_state("load")
        for href in page.eval_on_selector_all(
            "a[href^='/']", "links => links.map(a => a.getAttribute('href'))"
        ):
            target = href.split("#")[0]
            if target and not any(
                s in target
                for s in ("/logout/", "/download/", "/body/", "/api/", "/static/", "/healthz")
            ):
                queue.append(target)
    print(f"\n{len(seen)} console pages over HTTPS")
    assert {"/", "/topics/Crawl/", "/groups/crawler/", "/trace/", "/audit/"} <= seen, seen

    # The live trace's socket is WSS to the page's own origin (CSP connect-src 'self').
    page.goto(base + "/trace/?key=c-1&begin_ms=0")
    expect(page.locator('[data-role="pill"]')).to_contain_text("Live")
    assert page.evaluate("cairnTrace.socket.url").startswith("wss://127.0.0.1:")
