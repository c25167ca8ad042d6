"""accounts.roles: a user's role from its groups (the highest wins, a superuser is an admin,
an inactive user has none), setting it, and the subject a request stands for."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser, Group
from django.test import RequestFactory

from accounts.roles import ADMIN, OPERATOR, VIEWER, has_role, role_of, set_role, subject_of
from mqcore.access.authorizer import Subject

pytestmark = pytest.mark.django_db


def fresh(user_id: int) -> object:
    """The user as a new request would load it (no role cached on the object)."""
    return get_user_model().objects.get(pk=user_id)


def test_no_group_no_role_and_anonymous_none() -> None:
    user = get_user_model().objects.create_user("nobody")
    assert role_of(user) is None
    assert role_of(AnonymousUser()) is None
    assert role_of(None) is None
    assert not has_role(user, VIEWER)


def test_the_highest_of_several_groups_wins() -> None:
    user = get_user_model().objects.create_user("many")
    for name in (VIEWER, ADMIN, OPERATOR):
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    assert role_of(fresh(user.pk)) == ADMIN


def test_a_superuser_is_an_admin_without_groups() -> None:
    user = get_user_model().objects.create_superuser("root", password="x" * 12)
    assert role_of(user) == ADMIN and has_role(user, ADMIN)


def test_an_inactive_user_has_no_role() -> None:
    user = get_user_model().objects.create_user("gone", is_active=False)
    set_role(user, OPERATOR)
    assert role_of(fresh(user.pk)) is None


def test_set_role_keeps_exactly_one_role_group_and_forgets_the_cached_role() -> None:
    user = get_user_model().objects.create_user("mover")
    set_role(user, VIEWER)
    assert role_of(user) == VIEWER  # cached on the object from here
    set_role(user, OPERATOR)
    assert role_of(user) == OPERATOR
    names = set(fresh(user.pk).groups.values_list("name", flat=True))  # type: ignore[attr-defined]
    assert names == {OPERATOR}


def test_set_role_refuses_an_unknown_role() -> None:
    user = get_user_model().objects.create_user("odd")
    with pytest.raises(ValueError, match="expected one of viewer, operator, admin"):
        set_role(user, "superhero")


@pytest.mark.parametrize(
    ("role", "required", "allowed"),
    [(VIEWER, OPERATOR, False), (OPERATOR, OPERATOR, True), (ADMIN, VIEWER, True)],
)
def test_has_role_compares_ranks(role: str, required: str, allowed: bool) -> None:
    user = get_user_model().objects.create_user(f"u-{role}-{required}")
    set_role(user, role)
    assert has_role(user, required) is allowed


def test_subject_of_names_user_role_address_and_front_end() -> None:
    user = get_user_model().objects.create_user("alice")
    set_role(user, OPERATOR)
    factory = RequestFactory()
    rest = factory.get("/api/v1/topics", REMOTE_ADDR="10.1.2.3")
    rest.user = user
    console = factory.get("/topics/", REMOTE_ADDR="10.1.2.4")
    console.user = user
    assert subject_of(rest) == Subject("alice", OPERATOR, "10.1.2.3", "rest")
    assert subject_of(console) == Subject("alice", OPERATOR, "10.1.2.4", "console")


def test_subject_of_an_anonymous_request_without_address() -> None:
    request = RequestFactory().get("/api/v1/topics")
    request.user = AnonymousUser()
    del request.META["REMOTE_ADDR"]
    assert subject_of(request) == Subject(None, None, "*", "rest")
