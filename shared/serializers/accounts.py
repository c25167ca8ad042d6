"""Tokens, ACL entries and lockouts over REST (users are in :mod:`shared.serializers.admin`)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from accounts.models import ApiToken
from mqcore.access.model import (
    AclEntry,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    Principal,
    ResourceType,
)
from mqcore.errors import ValidationError as MQValidationError
from shared.serializers.admin import epoch_ms
from shared.serializers.common import (
    EpochMsField,
    PageQuerySerializer,
    StrictSerializer,
    page_serializer,
)

OPERATIONS = [op.label for op in Operation]
RESOURCE_TYPES = [t.label for t in ResourceType]

# -- tokens -----------------------------------------------------------------------------------


class TokenSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    username = serializers.CharField()
    created = serializers.IntegerField(help_text="epoch ms")
    expires = serializers.IntegerField(allow_null=True, help_text="epoch ms; null: never")
    last_used = serializers.IntegerField(
        allow_null=True, help_text="epoch ms, to the minute (written at most once a minute)"
    )
    revoked = serializers.IntegerField(allow_null=True, help_text="epoch ms; null: live")

    def to_representation(self, token: ApiToken) -> dict[str, Any]:
        return token_dict(token)


def token_dict(token: ApiToken) -> dict[str, Any]:
    return {
        "id": token.pk,
        "name": token.name,
        "username": token.user.get_username(),
        "created": epoch_ms(token.created),
        "expires": epoch_ms(token.expires),
        "last_used": epoch_ms(token.last_used),
        "revoked": epoch_ms(token.revoked),
    }


class IssuedTokenSerializer(TokenSerializer):
    token = serializers.CharField(
        help_text="the token, shown only now: send it as 'Authorization: Token <token>', or as "
        "the user's password from a Kafka client (SASL PLAIN or SCRAM)"
    )


TokenPageSerializer = page_serializer("TokenPageSerializer", TokenSerializer)


class TokenCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=100, help_text="what the token is for")
    expires = EpochMsField(required=False, allow_null=True, help_text="epoch ms; omit: never")
    username = serializers.CharField(
        required=False, max_length=150, help_text="whose token (admins only; default: yours)"
    )


class TokenQuerySerializer(PageQuerySerializer):
    username = serializers.CharField(
        required=False, max_length=150, help_text="whose tokens (admins only; default: yours)"
    )


# -- ACL entries ------------------------------------------------------------------------------


def _parse(parse: Any, value: str, field: str) -> Any:
    try:
        return parse(value, field)
    except MQValidationError as exc:
        message = str(exc).removeprefix(f"{exc.field}: ")
        raise serializers.ValidationError(message, code=exc.rule) from None


def _store_name(resource_type: str | None, name: str | None) -> str | None:
    """Topic and group names as the store spells them: a Kafka name's ``.`` is ``|`` there
    (store names never hold a ``.``, so the translation is unambiguous and an entry typed
    with Kafka's name, ``shop.orders``, covers what Kafka clients call by it)."""
    if name is None or resource_type not in ("topic", "group"):
        return name
    return name.replace(".", "|")


class AclEntrySerializer(StrictSerializer):
    """One entry, as REST shows and takes it (README "Security")."""

    principal = serializers.CharField(
        max_length=160, help_text="User:<name>, Role:<viewer|operator|admin> or User:*"
    )
    resource_type = serializers.ChoiceField(RESOURCE_TYPES)
    resource_name = serializers.CharField(
        max_length=255, help_text="a name, a prefix (pattern_type prefixed) or *"
    )
    pattern_type = serializers.ChoiceField(["literal", "prefixed"], default="literal")
    operation = serializers.ChoiceField(OPERATIONS)
    permission = serializers.ChoiceField(["allow", "deny"])
    host = serializers.CharField(max_length=64, default="*", help_text="client address or *")

    def validate_principal(self, value: str) -> str:
        _parse(Principal.parse, value, "principal")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        try:
            attrs["entry"] = AclEntry(
                principal=Principal.parse(attrs["principal"]),
                resource_type=ResourceType.parse(attrs["resource_type"]),
                resource_name=_store_name(attrs["resource_type"], attrs["resource_name"]),
                pattern_type=PatternType.parse(attrs["pattern_type"]),
                operation=Operation.parse(attrs["operation"]),
                permission=Permission.parse(attrs["permission"]),
                host=attrs["host"],
            )
        except MQValidationError as exc:
            message = str(exc).removeprefix(f"{exc.field}: ")
            raise serializers.ValidationError({exc.field: [message]}, code=exc.rule) from None
        return attrs


class AclRecordSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    principal = serializers.CharField()
    resource_type = serializers.ChoiceField(RESOURCE_TYPES)
    resource_name = serializers.CharField()
    pattern_type = serializers.ChoiceField(["literal", "prefixed"])
    operation = serializers.ChoiceField(OPERATIONS)
    permission = serializers.ChoiceField(["allow", "deny"])
    host = serializers.CharField()


def acl_dict(pk: int, entry: AclEntry) -> dict[str, Any]:
    return {"id": pk, **entry.as_dict()}


AclPageSerializer = page_serializer("AclPageSerializer", AclRecordSerializer)


class AclCreateSerializer(StrictSerializer):
    entries = AclEntrySerializer(many=True, allow_empty=False, max_length=1000)


class AclCreatedSerializer(serializers.Serializer):
    created = serializers.IntegerField(help_text="entries that were new")
    entries = AclRecordSerializer(many=True)


class AclFilterSerializer(PageQuerySerializer):
    """Which entries (every parameter optional; together they must all match)."""

    id = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
        required=False,
        help_text="entry ids (repeat the parameter for several)",
    )
    principal = serializers.CharField(required=False, max_length=160)
    resource_type = serializers.ChoiceField(RESOURCE_TYPES, required=False)
    resource_name = serializers.CharField(required=False, max_length=255)
    pattern_type = serializers.ChoiceField(
        ["any", "literal", "prefixed", "match"],
        default="any",
        help_text="match: every entry that applies to a resource named resource_name",
    )
    operation = serializers.ChoiceField(OPERATIONS, required=False)
    permission = serializers.ChoiceField(["allow", "deny"], required=False)
    host = serializers.CharField(required=False, max_length=64)

    def validate_principal(self, value: str) -> str:
        _parse(Principal.parse, value, "principal")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["pattern_type"] == "match" and "resource_name" not in attrs:
            raise serializers.ValidationError(
                {"resource_name": ["pattern_type match needs a resource_name"]}, code="required"
            )
        attrs["filter"] = AclFilter(
            principal=Principal.parse(attrs["principal"]) if "principal" in attrs else None,
            host=attrs.get("host"),
            resource_type=ResourceType.parse(attrs["resource_type"])
            if "resource_type" in attrs
            else None,
            resource_name=_store_name(attrs.get("resource_type"), attrs.get("resource_name")),
            pattern=attrs["pattern_type"],
            operation=Operation.parse(attrs["operation"]) if "operation" in attrs else None,
            permission=Permission.parse(attrs["permission"]) if "permission" in attrs else None,
        )
        return attrs


class AclDeletedSerializer(serializers.Serializer):
    deleted = serializers.IntegerField()
    entries = AclRecordSerializer(many=True)


# -- lockouts ---------------------------------------------------------------------------------


class UnlockSerializer(StrictSerializer):
    address = serializers.IPAddressField(
        required=False, help_text="also clear this client address's failed logins"
    )


class UnlockedSerializer(serializers.Serializer):
    username = serializers.CharField()
    cleared = serializers.DictField(help_text="the failed-login state there was")
