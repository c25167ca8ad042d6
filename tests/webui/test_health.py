"""The overview's store-health banner: shown only while degraded, problems with their time and
facts, conditions with progress, Acknowledge buttons for operators and admins only, and the
acknowledgement POST (CSRF, audit, what the page says afterwards)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from accounts.models import AuditEntry
from mqcore.broker import Broker
from mqcore.store.health import StoreHealth
from tests.webui.conftest import client_for

pytestmark = pytest.mark.django_db

QUARANTINE = "quarantine:00000000000004194304"
TOPICS = "config_recovered:topics.json"
ACK_URL = "/health/acknowledge/"


def html(response: Any) -> str:
    return response.content.decode()


@pytest.fixture
def health(broker: Broker) -> StoreHealth:
    return broker.store.health


@pytest.fixture
def reported(health: StoreHealth) -> StoreHealth:
    health.report(
        "quarantine",
        QUARANTINE,
        "CommitLog bytes 4194304..4194560 failed their CRC and were quarantined",
        {"file": "00000000000004194304", "length": 256, "reason": "body CRC mismatch"},
    )
    health.report("config_recovered", TOPICS, "topics.json was recovered from its backup")
    health.set_condition(
        "rebuilding", "rebuild:cq", "Rebuilding ConsumeQueues", {"queues": 8}, progress=0.25
    )
    return health


def banner(page: str) -> str:
    found = re.search(r'<section class="health-banner.*?</section>', page, re.S)
    assert found, "no health banner"
    return found.group(0)


def test_no_banner_while_the_store_is_ok(viewer: Any, health: StoreHealth) -> None:
    client = client_for(viewer)
    assert 'data-testid="health-banner"' not in html(client.get("/"))
    fragment = html(client.get("/?partial=health"))
    assert "health-banner" not in fragment and "<html" not in fragment


def test_banner_shows_problems_with_time_and_detail_and_conditions_with_progress(
    viewer: Any, reported: StoreHealth
) -> None:
    page = html(client_for(viewer).get("/"))
    shown = banner(page)
    assert page.index("health-banner") < page.index("<h1>Overview</h1>")  # at the top
    assert "Store degraded" in shown and "2 problems to acknowledge · 1 condition holding" in shown
    quarantine = reported.problems()[0]
    assert "failed their CRC and were quarantined" in shown
    assert f'data-ms="{quarantine.first_seen_ms}"' in shown  # when it was first seen
    assert "<details" in shown and "body CRC mismatch" in shown  # the facts, expandable
    assert "topics.json was recovered from its backup" in shown
    assert "The report has no further facts." in shown
    assert "Rebuilding ConsumeQueues" in shown
    assert '<rect width="25.00" height="1"/>' in shown and 'aria-valuenow="25.0"' in shown
    # The refreshed fragment carries the same banner (the page re-reads it every 5 s).
    reported.set_condition("rebuilding", "rebuild:cq", "Rebuilding ConsumeQueues", progress=0.5)
    fragment = html(client_for(viewer).get("/?partial=health"))
    assert "<html" not in fragment and '<rect width="50.00" height="1"/>' in fragment


def test_a_condition_alone_is_a_warning_without_buttons(operator: Any, health: StoreHealth) -> None:
    health.set_condition("disk_full", "disk", "Disk full: puts are refused until space is freed")
    shown = banner(html(client_for(operator).get("/")))
    assert "conditions-only" in shown and "1 condition holding" in shown
    assert "Disk full: puts are refused" in shown
    assert "Acknowledge" not in shown and "progressbar" not in shown


def test_buttons_per_role(viewer: Any, operator: Any, admin: Any, reported: StoreHealth) -> None:
    seen = banner(html(client_for(viewer).get("/")))
    assert "<button" not in seen and ACK_URL not in seen
    assert "until an operator or admin acknowledges it" in seen
    for user in (operator, admin):
        shown = banner(html(client_for(user).get("/")))
        assert shown.count(">Acknowledge</button>") == 2  # one per problem
        assert "Acknowledge all 2" in shown
        assert "csrfmiddlewaretoken" in shown


def test_viewer_is_refused_whatever_the_page_shows(viewer: Any, reported: StoreHealth) -> None:
    response = client_for(viewer).post(ACK_URL, {"id": QUARANTINE})
    assert response.status_code == 403 and "needs the operator role" in html(response)
    assert len(reported.problems()) == 2
    assert not AuditEntry.objects.exists()


def test_operator_acknowledges_one_with_csrf_and_it_is_audited(
    operator: Any, reported: StoreHealth
) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post(ACK_URL, {"id": QUARANTINE}).status_code == 403  # no CSRF token
    assert len(reported.problems()) == 2

    page = html(client.get("/"))
    form = re.search(
        r'<form method="post" action="/health/acknowledge/" class="inline">(.*?)</form>',
        page[page.index(f'data-id="{QUARANTINE}"') :],
        re.S,
    )
    assert form
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.group(1))
    assert token and f'name="id" value="{QUARANTINE}"' in form.group(1)
    response = client.post(ACK_URL, {"csrfmiddlewaretoken": token.group(1), "id": QUARANTINE})
    assert response.status_code == 302 and response["Location"] == "/"

    assert [p.id for p in reported.problems()] == [TOPICS]
    (done,) = [p for p in reported.problems(include_acknowledged=True) if p.acknowledged]
    assert (done.id, done.acknowledged_by) == (QUARANTINE, "otto")
    (entry,) = AuditEntry.objects.all()
    assert (entry.action, entry.target_type, entry.target) == (
        "problem.acknowledge",
        "problem",
        QUARANTINE,
    )
    assert entry.username == "otto" and "quarantined" in entry.new_value["summary"]

    after = html(client.get("/"))
    assert "Acknowledged 1 problem: CommitLog bytes 4194304" in after
    shown = banner(after)
    assert "1 problem to acknowledge" in shown and QUARANTINE not in shown
    assert "Acknowledge all" not in shown  # one problem left: its own button is enough


def test_acknowledge_all_takes_only_the_problems_shown(
    operator: Any, reported: StoreHealth
) -> None:
    client = client_for(operator)
    shown = banner(html(client.get("/")))
    form = re.search(r"<form[^>]*>((?:(?!</form>).)*?Acknowledge all 2.*?)</form>", shown, re.S)
    assert form
    ids = re.findall(r'name="id" value="([^"]+)"', form.group(1))
    assert ids == [QUARANTINE, TOPICS]
    reported.report("derived_rebuilt", "rebuilt:idx", "An IndexFile was rebuilt")  # unseen
    response = client.post(ACK_URL, {"id": ids}, follow=True)
    page = html(response)
    assert "Acknowledged 2 problems" in page
    assert [p.id for p in reported.problems()] == ["rebuilt:idx"]
    assert "An IndexFile was rebuilt" in banner(page)
    assert set(AuditEntry.objects.values_list("target", flat=True)) == {QUARANTINE, TOPICS}
    reported.clear_condition("rebuild:cq")
    client.post(ACK_URL, {"id": "rebuilt:idx"})
    assert 'data-testid="health-banner"' not in html(client.get("/"))


def test_already_acknowledged_and_unknown_ids_say_so(
    operator: Any, admin: Any, reported: StoreHealth
) -> None:
    client_for(admin).post(ACK_URL, {"id": QUARANTINE})
    page = html(client_for(operator).post(ACK_URL, {"id": QUARANTINE}, follow=True))
    assert "Already acknowledged by ada: CommitLog bytes" in page
    page = html(client_for(operator).post(ACK_URL, {"id": [TOPICS, "nope"]}, follow=True))
    assert "No store problem nope is reported any more; nothing was acknowledged." in page
    assert [p.id for p in reported.problems()] == [TOPICS]
    page = html(client_for(operator).post(ACK_URL, {}, follow=True))
    assert "Choose a problem to acknowledge." in page
    page = html(client_for(operator).post(ACK_URL, {"id": "x" * 400}, follow=True))
    assert "Nothing acknowledged: Ensure this field has no more than 300 characters." in page
    assert AuditEntry.objects.count() == 1  # the admin's one acknowledgement


def test_acknowledge_is_post_only(operator: Any, reported: StoreHealth) -> None:
    assert client_for(operator).get(ACK_URL).status_code == 405


def test_every_page_header_says_when_the_store_is_degraded(
    viewer: Any, reported: StoreHealth
) -> None:
    client = client_for(viewer)
    topics = html(client.get("/topics/"))
    assert 'data-testid="degraded-chip"' in topics and "degraded, see the overview" in topics
    assert 'data-testid="health-banner"' not in topics  # the banner is the overview's
    reported.acknowledge(None, "ada")
    reported.clear_condition("rebuild:cq")
    assert 'data-testid="degraded-chip"' not in html(client.get("/topics/"))
