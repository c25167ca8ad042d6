"""Impact before every destructive change, in a real browser against a real broker: the
config upload's diff and its confirmation, the queue shrink's stranded messages, what a topic
or group delete loses, and a DLQ resend that warns before sending the same message again.
Each dialog is saved under test-output/screenshots/ (impact-*.png)."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from tests.e2e.conftest import Server, log_in, new_context, shot

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def page(browser: Any) -> Any:
    context = new_context(browser, viewport={"width": 1360, "height": 900}, color_scheme="light")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield page
    # A form sent back with a field error is a 400 page, which chromium logs as a failed load.
    errors = [e for e in errors if "status of 400 (Bad Request)" not in e]
    context.close()
    assert not errors, errors


def _backlog(server: Server, topic: str, group: str, queues: int = 4) -> list[dict[str, Any]]:
    """``topic`` with one message per queue; ``group`` consumed queue 0 only."""
    server.api(
        "POST", "/topics", {"name": topic, "read_queue_nums": queues, "write_queue_nums": queues}
    )
    server.api("POST", "/groups", {"name": group})
    sent = [
        server.api(
            "POST",
            f"/topics/{topic}/messages",
            {"messages": [{"body": f"{topic} {q}", "keys": [f"{topic}-{q}"], "queue_id": q}]},
        )["results"][0]
        for q in range(queues)
    ]
    offsets = [{"topic": topic, "queue_id": q, "offset": 1 if q == 0 else 0} for q in range(queues)]
    server.api("PUT", f"/groups/{group}/offsets", {"offsets": offsets})
    _until(lambda: server.api("GET", f"/groups/{group}/lag")["summary"]["total_lag"] == queues - 1)
    return sent


def _until(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_queue_shrink_shows_the_stranded_messages_and_needs_confirmation(
    server: Server, page: Any
) -> None:
    from playwright.sync_api import expect

    base = server.base
    _backlog(server, "Shrink", "shrink-app")
    log_in(page, base)
    page.goto(base + "/topics/Shrink/edit/")
    page.fill("#f-read", "1")
    page.fill("#f-write", "1")
    page.get_by_role("button", name="Save changes").click()
    notice = page.locator('[data-testid="shrink-impact"]')
    expect(notice).to_contain_text("3 messages stranded")
    expect(notice).to_contain_text("shrink-app (3)")
    queues = page.locator('[data-testid="impact-queues"] tbody tr')
    expect(queues).to_have_count(3)
    expect(queues.nth(0)).to_contain_text("1")
    groups = page.locator('[data-testid="impact-groups"] tbody tr')
    expect(groups).to_have_count(1)
    expect(groups.first).to_contain_text("shrink-app")
    expect(groups.first).to_contain_text("3")
    shot(page, "impact-01-queue-shrink")
    assert server.api("GET", "/topics/Shrink")["read_queue_nums"] == 4  # nothing saved yet

    # Without the box ticked it asks again; ticked, it saves and says what it stranded.
    page.get_by_role("button", name="Save and strand 3 messages").click()
    expect(notice).to_be_visible()
    assert server.api("GET", "/topics/Shrink")["read_queue_nums"] == 4
    page.check("#f-confirm-impact")
    page.get_by_role("button", name="Save and strand 3 messages").click()
    expect(page).to_have_url(base + "/topics/Shrink/")
    expect(page.locator(".flash-success")).to_contain_text("3 messages stranded")
    assert server.api("GET", "/topics/Shrink")["read_queue_nums"] == 1
    (entry,) = server.api("GET", "/audit?action=topic.update&target=Shrink")["results"]
    assert entry["new_value"]["stranded"]["messages"] == 3


def test_topic_and_group_delete_show_what_is_lost(server: Server, page: Any) -> None:
    from playwright.sync_api import expect

    base = server.base
    _backlog(server, "Doomed", "doomed-app", queues=2)
    log_in(page, base)
    page.goto(base + "/topics/Doomed/delete/")
    notice = page.locator('[data-testid="delete-impact"]')
    expect(notice).to_contain_text("2 messages become unreachable")
    expect(notice).to_contain_text("1 group had not consumed them yet")
    expect(page.locator('[data-testid="impact-queues"] tbody tr')).to_have_count(2)
    expect(page.locator('[data-testid="impact-groups"] tbody tr')).to_contain_text("doomed-app")
    shot(page, "impact-02-topic-delete")

    # The group first: its lag per queue, then the delete.
    page.goto(base + "/groups/doomed-app/delete/")
    expect(page.locator('[data-testid="delete-impact"]')).to_contain_text(
        "doomed-app is 1 message behind"
    )
    lag = page.locator('[data-testid="impact-lag"] tbody tr')
    expect(lag).to_have_count(1)
    expect(lag.first).to_contain_text("Doomed")
    shot(page, "impact-03-group-delete")
    page.fill("#f-confirm", "doomed-app")
    page.get_by_role("button", name="Delete group").click()
    expect(page).to_have_url(base + "/groups/")
    (entry,) = server.api("GET", "/audit?action=group.delete&target=doomed-app")["results"]
    assert entry["old_value"]["impact"]["lag"] == 1

    page.goto(base + "/topics/Doomed/delete/")
    page.fill("#f-confirm", "Doomed")
    page.get_by_role("button", name="Delete topic").click()
    expect(page).to_have_url(base + "/topics/")
    expect(page.locator(".flash-success")).to_contain_text("2 messages lost")
    (entry,) = server.api("GET", "/audit?action=topic.delete&target=Doomed")["results"]
    assert entry["old_value"]["impact"]["messages"] == 2


def test_config_upload_shows_the_diff_and_applies_only_when_confirmed(
    server: Server, page: Any
) -> None:
    from playwright.sync_api import expect

    base = server.base
    _backlog(server, "Legacy", "legacy-app")
    server.api("POST", "/topics", {"name": "Keeper", "read_queue_nums": 2, "write_queue_nums": 2})
    document = server.api("GET", "/config/topics.json?format=json", token=server.admin_token)
    table = document["topicConfigTable"]
    del table["Legacy"]
    table["Keeper"]["perm"] = 4
    table["Newcomer"] = dict(table["Keeper"], topicName="Newcomer", perm=6)
    upload = json.dumps(document).encode()

    log_in(page, base)
    page.goto(base + "/config/")
    card = page.locator("#doc-1")
    card.get_by_text("Replace it with a file").click()
    card.locator("input[type=file]").set_input_files(
        {"name": "topics.json", "mimeType": "application/json", "buffer": upload}
    )
    card.get_by_role("button", name="Preview changes to topics.json").click()
    expect(page.locator("h1")).to_contain_text("Import topics.json?")
    summary = page.locator('[data-testid="diff-summary"]')
    expect(summary).to_contain_text("1 added, 1 removed, 1 changed")
    expect(summary).to_contain_text("4 messages in removed topics")
    removed = page.locator('[data-testid="diff-removed"]')
    expect(removed).to_contain_text("Legacy")
    expect(removed.locator('[data-testid="impact-queues"] tbody tr')).to_have_count(4)
    expect(removed.locator('[data-testid="impact-groups"]')).to_contain_text("legacy-app")
    changed = page.locator('[data-testid="diff-changed"]')
    expect(changed).to_contain_text("Keeper")
    expect(changed).to_contain_text("perm")
    expect(page.locator('[data-testid="diff-added"]')).to_contain_text("Newcomer")
    expect(page.locator('[data-testid="diff-at-risk"]')).to_be_visible()
    shot(page, "impact-04-config-diff")
    assert server.api("GET", "/topics/Legacy")["name"] == "Legacy"  # nothing applied yet

    page.get_by_role("button", name="Apply the import").click()
    expect(page.locator(".form-error")).to_contain_text("tick the box")
    assert server.api("GET", "/topics/Keeper")["perm"] == 6
    page.check("#f-confirm")
    page.get_by_role("button", name="Apply the import").click()
    expect(page).to_have_url(base + "/config/")
    flash = page.locator(".flash-success")
    expect(flash).to_contain_text("1 added, 1 removed, 1 changed")
    expect(flash).not_to_contain_text("nothing else changed")
    shot(page, "impact-05-config-applied")
    assert server.api("GET", "/topics/Keeper")["perm"] == 4
    assert server.api("GET", "/topics/Newcomer")["perm"] == 6
    topics = server.api("GET", "/topics?search=Legacy")["results"]
    assert topics == []
    (entry,) = server.api("GET", "/audit?action=config.import")["results"]
    assert entry["new_value"]["diff"]["removed"] == ["Legacy"]


def test_dlq_resend_names_the_msgid_and_warns_before_resending_again(
    server: Server, page: Any
) -> None:
    from playwright.sync_api import expect

    base = server.base
    server.api("POST", "/topics", {"name": "Fragile", "read_queue_nums": 1, "write_queue_nums": 1})
    server.api("POST", "/groups", {"name": "fragile-app", "retry_max_times": 1})
    sent = server.api(
        "POST", "/topics/Fragile/messages", {"messages": [{"body": "poison", "keys": ["p-1"]}]}
    )["results"][0]
    retried = server.api(
        "POST",
        f"/groups/fragile-app/messages/{sent['offset_msg_id']}/retry",
        {"delay_level": -1},
    )
    assert retried["action"] == "DLQ"
    _until(lambda: server.api("GET", "/topics/%25DLQ%25fragile-app")["message_count"] == 1)

    log_in(page, base)
    page.goto(base + "/groups/fragile-app/dlq/")
    row = page.locator("table.data tbody tr").filter(has_text=sent["msg_id"])
    expect(row).to_have_count(1)
    row.locator("input[name=msg_id]").check()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Resend selected").click()
    outcomes = page.locator('[data-testid="resend-outcomes"] tbody tr')
    expect(outcomes).to_have_count(1)
    expect(outcomes.first).to_contain_text(sent["msg_id"])  # the id the list shows
    expect(outcomes.first).to_contain_text("resent")
    shot(page, "impact-06-dlq-resent")
    _until(lambda: server.api("GET", "/topics/Fragile")["message_count"] == 2)

    # The list remembers it; selecting it again warns and resends nothing.
    page.goto(base + "/groups/fragile-app/dlq/")
    row = page.locator("table.data tbody tr").filter(has_text=sent["msg_id"])
    expect(row.locator('[data-testid="resent-before"]')).to_contain_text("resent 1×")
    row.locator("input[name=msg_id]").check()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Resend selected").click()
    warning = page.locator('[data-testid="resend-again"]')
    expect(warning).to_contain_text("resent from this dead-letter queue before")
    expect(warning).to_contain_text(sent["msg_id"])
    expect(warning).to_contain_text("by ops")
    expect(page.locator('[data-testid="resend-outcomes"]')).to_have_count(0)
    shot(page, "impact-07-dlq-resend-again")
    assert server.api("GET", "/topics/Fragile")["message_count"] == 2

    warning.get_by_role("button", name="Resend again").click()
    expect(outcomes.first).to_contain_text("resent again")
    expect(outcomes.first).to_contain_text(sent["msg_id"])
    _until(lambda: server.api("GET", "/topics/Fragile")["message_count"] == 3)
    entries = server.api("GET", f"/audit?action=message.dlq_resend&target={sent['msg_id']}")
    assert len(entries["results"]) == 2
    assert all(
        re.fullmatch(r"[0-9A-F]{32}", e["new_value"]["dlq_offset_msg_id"])
        for e in entries["results"]
    )
