"""accounts.audit: every way of writing an entry (a request, a subject of another front end,
a management command, a send's quick INSERT) names who, from where and through which front
end, and keeps plain JSON."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.test import RequestFactory

from accounts import audit
from accounts.models import AuditEntry
from accounts.roles import OPERATOR, set_role
from mqcore.access.authorizer import Subject

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator() -> object:
    user = get_user_model().objects.create_user("olga")
    set_role(user, OPERATOR)
    return user


def request_as(user: object, path: str, address: str = "10.0.0.7") -> object:
    request = RequestFactory().post(path, REMOTE_ADDR=address)
    request.user = user
    return request


def columns(entry: AuditEntry) -> dict[str, object]:
    return {
        f.name: getattr(entry, f.attname)
        for f in AuditEntry._meta.concrete_fields
        if f.name not in ("id", "timestamp")
    }


def test_record_for_a_rest_request(operator: object) -> None:
    entry = audit.record(
        request_as(operator, "/api/v1/topics"),
        "topic.create",
        "topic",
        "orders",
        new={"queues": 4, 1: "int keys become strings"},
    )
    entry.refresh_from_db()
    assert (entry.username, entry.role, entry.principal, entry.front_end) == (
        "olga",
        OPERATOR,
        "User:olga",
        "rest",
    )
    assert entry.remote_addr == "10.0.0.7" and entry.user_id == operator.pk  # type: ignore[attr-defined]
    assert entry.old_value is None
    assert entry.new_value == {"queues": 4, "1": "int keys become strings"}


def test_record_for_an_anonymous_console_request() -> None:
    entry = audit.record(request_as(AnonymousUser(), "/login/"), "login.failed", "user", "x")
    assert (entry.username, entry.role, entry.principal, entry.front_end) == (
        "anonymous",
        "",
        "User:ANONYMOUS",
        "console",
    )


def test_record_for_a_management_command_and_for_the_broker_itself() -> None:
    command = audit.record(None, "topic.create", "topic", "t", username="manage.py importconfig")
    assert (command.front_end, command.principal, command.remote_addr) == ("command", "", "")
    cleanup = audit.record(
        None, "store.segment.delete", "commitlog_segment", "f", username="cleanup"
    )
    assert (cleanup.username, cleanup.front_end, cleanup.principal) == ("cleanup", "", "")


def test_record_subject_for_the_kafka_listener(operator: object) -> None:
    subject = Subject("olga", OPERATOR, "192.0.2.1", "kafka")
    entry = audit.record_subject(subject, "topic.delete", "topic", "t" * 400, old={"q": 1})
    assert entry.user_id == operator.pk  # type: ignore[attr-defined]
    assert (entry.principal, entry.front_end, entry.remote_addr) == (
        "User:olga",
        "kafka",
        "192.0.2.1",
    )
    assert len(entry.target) == 300 and entry.old_value == {"q": 1}


def test_record_subject_of_an_unknown_user_from_any_host() -> None:
    entry = audit.record_subject(Subject(None, None, "*", "kafka"), "acl.create", "acl", "User:x")
    assert entry.user_id is None
    assert (entry.username, entry.remote_addr, entry.principal) == (
        "anonymous",
        "",
        "User:ANONYMOUS",
    )


def test_record_quickly_writes_the_row_record_writes(operator: object) -> None:
    new = {"count": 2, "msg_ids": ["A", "B"]}
    slow = audit.record(
        request_as(operator, "/api/v1/topics/t/messages"), "message.send", "topic", "t", new=new
    )
    audit.record_quickly(
        request_as(operator, "/api/v1/topics/t/messages"), "message.send", "topic", "t", new=new
    )
    quick = AuditEntry.objects.order_by("-id").first()
    assert quick is not None and quick.pk != slow.pk
    assert columns(quick) == columns(AuditEntry.objects.get(pk=slow.pk))
