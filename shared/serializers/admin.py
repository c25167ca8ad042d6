"""Broker status, the audit log, users and logins."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.contrib.auth.models import AbstractUser
from rest_framework import serializers

from accounts.models import AuditEntry
from accounts.roles import ROLES, role_of
from mqcore.broker.types import BrokerStatus
from shared.serializers.common import (
    EpochMsField,
    PageQuerySerializer,
    StrictSerializer,
    page_serializer,
)
from shared.serializers.health import StoreHealthSerializer
from shared.serializers.tiered import TierSummarySerializer


def epoch_ms(value: Any) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


# -- status -----------------------------------------------------------------------------------


class ServiceStateSerializer(serializers.Serializer):
    """One service: an in-process loop's state, or what a Celery worker last recorded."""

    name = serializers.CharField(required=False)
    runs = serializers.IntegerField(required=False)
    last_run_ms = serializers.IntegerField(required=False)
    last_error = serializers.CharField(required=False, allow_blank=True)
    last_error_ms = serializers.IntegerField(required=False)
    errors = serializers.IntegerField(required=False)
    last_result = serializers.DictField(required=False)
    lag_bytes = serializers.IntegerField(required=False, help_text="reput, flush, follow")


class StatusSerializer(serializers.Serializer):
    """The broker's store, disk, rates and services."""

    version = serializers.CharField()
    broker_name = serializers.CharField()
    cluster_name = serializers.CharField()
    store_root = serializers.CharField()
    started = serializers.BooleanField()
    uptime_ms = serializers.IntegerField()
    services_mode = serializers.ChoiceField(["inline", "celery"])
    store_size_bytes = serializers.IntegerField()
    disk_total_bytes = serializers.IntegerField()
    disk_used_bytes = serializers.IntegerField()
    disk_free_bytes = serializers.IntegerField()
    disk_used_ratio = serializers.FloatField()
    put_tps = serializers.FloatField(help_text="messages stored per second, last minute")
    get_tps = serializers.FloatField(help_text="messages pulled per second, last minute")
    put_total = serializers.IntegerField()
    get_total = serializers.IntegerField()
    commitlog_min_offset = serializers.IntegerField()
    commitlog_max_offset = serializers.IntegerField()
    dispatch_behind_bytes = serializers.IntegerField()
    topic_count = serializers.IntegerField()
    group_count = serializers.IntegerField()
    services = serializers.DictField(child=ServiceStateSerializer())
    tier = TierSummarySerializer(help_text="tiered storage totals (GET /tiered per queue)")
    health = StoreHealthSerializer(
        help_text="the store's problems (until acknowledged) and conditions"
    )


def status_dict(status: BrokerStatus, version: str, services_mode: str) -> dict[str, Any]:
    data = asdict(status)
    data["disk_used_ratio"] = round(status.disk_used_ratio, 6)
    data["version"] = version
    data["services_mode"] = services_mode
    return data


# -- audit ------------------------------------------------------------------------------------


class AuditEntrySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    timestamp = serializers.IntegerField(help_text="epoch ms")
    username = serializers.CharField()
    role = serializers.CharField(allow_blank=True)
    action = serializers.CharField(help_text="e.g. topic.create, group.offsets.reset")
    target_type = serializers.CharField()
    target = serializers.CharField()
    old_value = serializers.JSONField(allow_null=True)
    new_value = serializers.JSONField(allow_null=True)
    remote_addr = serializers.CharField(allow_blank=True, help_text="the client's address")
    principal = serializers.CharField(allow_blank=True, help_text="User:<name>")
    front_end = serializers.CharField(
        allow_blank=True, help_text="rest, console, kafka or command (blank: the broker itself)"
    )

    def to_representation(self, e: AuditEntry) -> dict[str, Any]:
        return {
            "id": e.pk,
            "timestamp": epoch_ms(e.timestamp),
            "username": e.username,
            "role": e.role,
            "action": e.action,
            "target_type": e.target_type,
            "target": e.target,
            "old_value": e.old_value,
            "new_value": e.new_value,
            "remote_addr": e.remote_addr,
            "principal": e.principal,
            "front_end": e.front_end,
        }


AuditPageSerializer = page_serializer("AuditPageSerializer", AuditEntrySerializer)


class AuditQuerySerializer(PageQuerySerializer):
    target = serializers.CharField(required=False, max_length=300, help_text="exact target name")
    target_type = serializers.CharField(required=False, max_length=32)
    action = serializers.CharField(
        required=False, max_length=64, help_text="exact, or a prefix ending in '.'"
    )
    username = serializers.CharField(required=False, max_length=150)
    front_end = serializers.CharField(required=False, max_length=16)
    since = EpochMsField(required=False, help_text="epoch ms, inclusive")
    until = EpochMsField(required=False, help_text="epoch ms, exclusive")


# -- users and logins -------------------------------------------------------------------------


class UserSerializer(serializers.Serializer):
    username = serializers.CharField()
    role = serializers.ChoiceField(list(ROLES), allow_null=True)
    is_active = serializers.BooleanField()
    is_superuser = serializers.BooleanField()
    has_token = serializers.BooleanField(help_text="has a live (unrevoked, unexpired) token")
    date_joined = serializers.IntegerField()
    last_login = serializers.IntegerField(allow_null=True)
    failed_logins = serializers.IntegerField(help_text="failed logins in a row")
    locked_until = serializers.IntegerField(
        allow_null=True, help_text="epoch ms the lockout ends; null: not locked out"
    )

    def to_representation(self, user: AbstractUser) -> dict[str, Any]:
        return user_dict(user)


def user_dict(user: AbstractUser) -> dict[str, Any]:
    from django.utils import timezone

    from accounts import logins
    from accounts.models import ApiToken

    state = logins.state(user)
    live = ApiToken.objects.filter(user=user, revoked__isnull=True).exclude(
        expires__lte=timezone.now()
    )
    return {
        "username": user.get_username(),
        "role": role_of(user),
        "is_active": user.is_active,
        "is_superuser": user.is_superuser,
        "has_token": live.exists(),
        "date_joined": epoch_ms(user.date_joined),
        "last_login": epoch_ms(user.last_login),
        "failed_logins": state["failed_logins"],
        "locked_until": epoch_ms(state["locked_until"]),
    }


UserPageSerializer = page_serializer("UserPageSerializer", UserSerializer)


class UserUpdateSerializer(StrictSerializer):
    role = serializers.ChoiceField(list(ROLES), required=False, allow_null=True)
    password = serializers.CharField(
        required=False, min_length=8, max_length=128, write_only=True, trim_whitespace=False
    )
    is_active = serializers.BooleanField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError("give at least one setting to change", code="empty")
        return attrs


class UserCreateSerializer(UserUpdateSerializer):
    """A new user. Without a password the user can only use tokens (``/tokens``)."""

    username = serializers.RegexField(r"^[\w.@+-]+\Z", max_length=150)
    role = serializers.ChoiceField(list(ROLES), allow_null=True)


class LoginSerializer(StrictSerializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=128, trim_whitespace=False)


class MeSerializer(serializers.Serializer):
    authenticated = serializers.BooleanField()
    username = serializers.CharField(allow_null=True)
    role = serializers.ChoiceField(list(ROLES), allow_null=True)


class ConfigImportResultSerializer(serializers.Serializer):
    document = serializers.CharField()
    applied = serializers.BooleanField()
    dry_run = serializers.BooleanField()
    data_version = serializers.DictField()
    diff = serializers.DictField(
        help_text="entries added, removed and changed (field by field), the impact of the "
        "removed and changed ones (messages per queue, groups with lag), `at_risk` and a "
        "`summary`"
    )
