"""The access model every front end shares: principals, resources, operations, ACL entries.

Kafka's authorization model (KIP-11, ``kafka.security.authorizer.AclAuthorizer``), with
Cairn's roles as principals of their own:

* A **principal** is ``User:<name>`` (a Cairn user, authenticated by password, API token,
  SCRAM or a TLS client certificate), ``Role:<role>`` (every user holding that role), or
  ``User:*`` (everyone authenticated). Anonymous clients of an ``optional`` Kafka listener
  act as ``User:ANONYMOUS`` with the role ``CAIRN_KAFKA_ANONYMOUS_ROLE``.
* A **resource** is a topic, a consumer group, the cluster (one, named ``kafka-cluster`` as
  in Kafka) or a transactional id; an ACL entry names it literally, by prefix, or ``*``.
* An **operation** is what is done to it. Kafka's implications hold: ``DESCRIBE`` is allowed
  by an allow of ``READ``, ``WRITE``, ``DELETE`` or ``ALTER``; ``DESCRIBE_CONFIGS`` by an
  allow of ``ALTER_CONFIGS``; ``ALL`` covers every operation.

The wire codes are Kafka's (``AclOperation``, ``ResourceType``, ``PatternType``,
``AclPermissionType`` in the Kafka protocol), so CreateAcls/DescribeAcls/DeleteAcls carry them
unchanged; REST and the console use the lower-case names.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from mqcore.errors import ValidationError

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
ANONYMOUS = "ANONYMOUS"


class Operation(IntEnum):
    """Kafka's ``AclOperation`` codes (0 UNKNOWN and 1 ANY are filters, not operations)."""

    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12

    @property
    def label(self) -> str:
        """``describe-configs``: the name REST and the console use."""
        return self.name.lower().replace("_", "-")

    @classmethod
    def parse(cls, text: str, field: str = "operation") -> Operation:
        """An operation from its label (``describe-configs``) or name (``DESCRIBE_CONFIGS``).

        Raises:
            ValidationError: no such operation.
        """
        key = text.strip().upper().replace("-", "_")
        try:
            return cls[key]
        except KeyError:
            names = ", ".join(op.label for op in cls)
            raise ValidationError(field, "choice", f"{field} must be one of {names}") from None


class ResourceType(IntEnum):
    """Kafka's ``ResourceType`` codes (0 UNKNOWN, 1 ANY filter)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")

    @classmethod
    def parse(cls, text: str, field: str = "resource_type") -> ResourceType:
        key = text.strip().upper().replace("-", "_")
        try:
            return cls[key]
        except KeyError:
            names = ", ".join(t.label for t in cls)
            raise ValidationError(field, "choice", f"{field} must be one of {names}") from None


class PatternType(IntEnum):
    """Kafka's ``PatternType`` codes for stored entries (0 UNKNOWN, 1 ANY, 2 MATCH: filters)."""

    LITERAL = 3
    PREFIXED = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str, field: str = "pattern_type") -> PatternType:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValidationError(field, "choice", f"{field} must be literal or prefixed") from None


class Permission(IntEnum):
    """Kafka's ``AclPermissionType`` codes (0 UNKNOWN, 1 ANY filter)."""

    DENY = 2
    ALLOW = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str, field: str = "permission") -> Permission:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValidationError(field, "choice", f"{field} must be allow or deny") from None


#: An allow of the key also allows these (Kafka ``AclAuthorizer``'s implied operations).
IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who acts: ``kind`` ``User`` or ``Role``, and a name (``*`` for every user)."""

    kind: str
    name: str

    def __post_init__(self) -> None:
        if self.kind not in ("User", "Role"):
            raise ValidationError("principal", "kind", "a principal is User:<name> or Role:<role>")
        if not self.name:
            raise ValidationError("principal", "required", "a principal needs a name")

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"

    @classmethod
    def parse(cls, text: str, field: str = "principal") -> Principal:
        """``User:alice``, ``Role:viewer`` or ``User:*``.

        Raises:
            ValidationError: anything else.
        """
        kind, sep, name = text.strip().partition(":")
        if not sep or kind not in ("User", "Role") or not name:
            raise ValidationError(
                field, "format", f"{field} must be User:<name>, Role:<role> or User:*"
            )
        return cls(kind, name)

    @classmethod
    def user(cls, name: str) -> Principal:
        return cls("User", name)


@dataclass(frozen=True, slots=True)
class Resource:
    """A thing acted on: its type and its full name (``kafka-cluster`` for the cluster)."""

    type: ResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> Resource:
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def group(cls, name: str) -> Resource:
        return cls(ResourceType.GROUP, name)

    @classmethod
    def cluster(cls) -> Resource:
        return cls(ResourceType.CLUSTER, CLUSTER_NAME)


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ACL entry: ``permission`` of ``principal`` from ``host`` to do ``operation`` on
    resources of ``resource_type`` named ``resource_name`` (exactly, by prefix, or ``*``)."""

    principal: Principal
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    operation: Operation
    permission: Permission
    host: str = WILDCARD

    def __post_init__(self) -> None:
        if not self.resource_name:
            raise ValidationError("resource_name", "required", "an ACL entry names a resource")
        if self.pattern_type is PatternType.PREFIXED and self.resource_name == WILDCARD:
            raise ValidationError(
                "resource_name", "prefix", "a prefixed entry cannot be '*' (use literal '*')"
            )
        if not self.host:
            raise ValidationError("host", "required", "host is an address or '*'")

    def names(self, resource: Resource) -> bool:
        """Whether this entry is about ``resource`` (type and name pattern)."""
        if self.resource_type is not resource.type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return resource.name.startswith(self.resource_name)
        return self.resource_name in (WILDCARD, resource.name)

    def applies_to(self, principals: frozenset[Principal], host: str) -> bool:
        """Whether this entry speaks of one of ``principals`` connecting from ``host``."""
        return self.principal in principals and self.host in (WILDCARD, host)

    def covers(self, operation: Operation) -> bool:
        """Whether this entry's operation is ``operation`` (or ALL); for an allow, also an
        operation that implies it."""
        if self.operation in (Operation.ALL, operation):
            return True
        return self.permission is Permission.ALLOW and self.operation in IMPLIED_BY.get(
            operation, frozenset()
        )

    def as_dict(self) -> dict[str, str]:
        return {
            "principal": str(self.principal),
            "host": self.host,
            "resource_type": self.resource_type.label,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.label,
            "operation": self.operation.label,
            "permission": self.permission.label,
        }


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Which entries a DescribeAcls/DeleteAcls (or a REST query) is about; None = any.

    ``pattern`` follows Kafka's ``PatternType`` filters: ``"any"`` (either pattern type,
    name equal), ``"literal"`` / ``"prefixed"`` (that type, name equal), or ``"match"``:
    every entry that would apply to a resource named ``resource_name`` (literal equal or
    ``*``, or prefixed with a prefix of the name).
    """

    principal: Principal | None = None
    host: str | None = None
    resource_type: ResourceType | None = None
    resource_name: str | None = None
    pattern: str = "any"
    operation: Operation | None = None
    permission: Permission | None = None

    def __post_init__(self) -> None:
        if self.pattern not in ("any", "literal", "prefixed", "match"):
            raise ValidationError(
                "pattern_type", "choice", "pattern_type must be any, literal, prefixed or match"
            )

    def matches(self, entry: AclEntry) -> bool:
        """Whether ``entry`` is one this filter selects."""
        if self.principal is not None and entry.principal != self.principal:
            return False
        if self.host is not None and entry.host != self.host:
            return False
        if self.resource_type is not None and entry.resource_type is not self.resource_type:
            return False
        if self.operation is not None and entry.operation is not self.operation:
            return False
        if self.permission is not None and entry.permission is not self.permission:
            return False
        if self.pattern in ("literal", "prefixed") and entry.pattern_type.label != self.pattern:
            return False
        if self.resource_name is None:
            return True
        if self.pattern == "match":
            if entry.pattern_type is PatternType.PREFIXED:
                return self.resource_name.startswith(entry.resource_name)
            return entry.resource_name in (WILDCARD, self.resource_name)
        return entry.resource_name == self.resource_name
