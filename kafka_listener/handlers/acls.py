"""Kafka's own ACL administration: DescribeAcls (29), CreateAcls (30), DeleteAcls (31).

So that ``kafka-acls``-style tools and the kafka-python, confluent-kafka and kafkajs admin
clients manage the same ACL entries as REST and the console (``ctx.access``, the accounts
store). As in Kafka, describing needs DESCRIBE on the cluster and creating or deleting
ALTER on the cluster (admins, or an allow entry); otherwise the whole request, or every
entry of it, gets CLUSTER_AUTHORIZATION_FAILED (31).

Wire values are Kafka's and ``mqcore.access.model``'s alike (resource types 2-5, pattern
types 3 LITERAL / 4 PREFIXED, operations 2-12, permissions 2 DENY / 3 ALLOW); filters may
also say 1 ANY and, for pattern types, 2 MATCH. Principals are ``User:<name>``,
``User:*`` or Cairn's ``Role:<role>``. The cluster is named ``kafka-cluster``. Topic and
group names are translated to the store's names and back (``authz.py``), so a Kafka
client's ``orders.`` prefix is the console's ``orders|``. Names the store cannot hold (a
topic name with characters outside Kafka's) are refused.

An entry or filter that is not valid gets INVALID_REQUEST (42) with a message saying why;
the others of the same request are still carried out. Resource types Cairn does not have
(delegation tokens, users) are refused in entries and match nothing in filters. The
accounts store audits every change itself (``acl.create`` / ``acl.delete``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from mqcore.access.model import (
    CLUSTER_NAME,
    WILDCARD,
    AclEntry,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    Principal,
    ResourceType,
)
from mqcore.errors import ValidationError

from .. import mapping
from ..errors import ErrorCode
from .authz import CLUSTER
from .context import Call, KafkaContext

ANY = 1
_PATTERN_FILTERS = {1: "any", 2: "match", 3: "literal", 4: "prefixed"}
_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class _Invalid(Exception):
    """An entry or filter Cairn cannot take; ``str()`` says why."""


class _NoSuchType(Exception):
    """A filter about a resource type Cairn does not have: it matches nothing."""


# -- names -------------------------------------------------------------------------------


def to_store_name(rtype: ResourceType, name: str) -> str:
    """The name an entry about a Kafka resource holds (module docstring).

    Raises:
        _Invalid: a topic name with characters Kafka topics cannot have, or a cluster
            name other than ``kafka-cluster``.
    """
    if name == WILDCARD:
        return name
    if rtype is ResourceType.TOPIC:
        if not set(name) <= _TOPIC_CHARS:
            raise _Invalid(f"topic name {name!r} may only contain ASCII letters, digits, '.', "
                           "'_' and '-' (or be '*')")  # fmt: skip
        return mapping.to_store_topic(name)
    if rtype is ResourceType.GROUP:
        return mapping.escape_group(name)
    if rtype is ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise _Invalid(f"the cluster resource is named {CLUSTER_NAME!r}")
    return name


def to_kafka_name(rtype: ResourceType, name: str) -> str:
    """The Kafka name of a stored entry's resource name."""
    if name == WILDCARD:
        return name
    if rtype is ResourceType.TOPIC:
        return name.replace("|", ".")
    if rtype is ResourceType.GROUP:
        return mapping.from_store_group(name) or name
    return name


# -- parsing -----------------------------------------------------------------------------


def _enum[E: (ResourceType, Operation, Permission)](
    kind: type[E], code: int, what: str, filtering: bool
) -> E | None:
    if filtering and code == ANY:
        return None
    try:
        return kind(code)
    except ValueError:
        allowed = "ANY or " if filtering else ""
        raise _Invalid(f"{what} {code} is not one Cairn knows ({allowed}"
                       f"{', '.join(f'{m.value} {m.name}' for m in kind)})") from None  # fmt: skip


def _principal(text: str) -> Principal:
    try:
        return Principal.parse(text)
    except ValidationError as exc:
        raise _Invalid(f"{str(exc)}, not {text!r}") from None


def parse_entry(creation: dict[str, Any]) -> AclEntry:
    """The entry a CreateAcls creation asks for.

    Raises:
        _Invalid: why it cannot be stored.
    """
    rtype = _resource_type(creation["resource_type"], filtering=False)
    assert rtype is not None
    pattern = creation["resource_pattern_type"]
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise _Invalid(f"pattern type {pattern} is not 3 LITERAL or 4 PREFIXED")
    name = creation["resource_name"]
    if rtype is ResourceType.CLUSTER and pattern != PatternType.LITERAL:
        raise _Invalid("the cluster resource takes literal entries only")
    operation = _enum(Operation, creation["operation"], "operation", False)
    permission = _enum(Permission, creation["permission_type"], "permission type", False)
    assert operation is not None and permission is not None
    if not name:
        raise _Invalid("an ACL entry names a resource")
    try:
        return AclEntry(
            _principal(creation["principal"]),
            rtype,
            to_store_name(rtype, name),
            PatternType(pattern),
            operation,
            permission,
            creation["host"],
        )
    except ValidationError as exc:
        raise _Invalid(str(exc)) from None


def _resource_type(code: int, filtering: bool) -> ResourceType | None:
    if code in (6, 7):  # DELEGATION_TOKEN, USER: Kafka's, not Cairn's
        if filtering:
            raise _NoSuchType
        raise _Invalid(f"resource type {code} is not supported by Cairn")
    return _enum(ResourceType, code, "resource type", filtering)


def parse_filter(raw: dict[str, Any]) -> list[AclFilter]:
    """The model filters of a DescribeAcls request or a DeleteAcls filter: one, or one per
    resource type when a name is given for any type (names translate per type).

    Raises:
        _Invalid: why the filter is not valid.
        _NoSuchType: it is about a resource type Cairn does not have.
    """
    rtype = _resource_type(raw["resource_type_filter"], filtering=True)
    pattern = _PATTERN_FILTERS.get(raw["pattern_type_filter"])
    if pattern is None:
        raise _Invalid(f"pattern type filter {raw['pattern_type_filter']} is not 1 ANY, "
                       "2 MATCH, 3 LITERAL or 4 PREFIXED")  # fmt: skip
    principal = raw["principal_filter"]
    common: dict[str, Any] = {
        "principal": _principal(principal) if principal is not None else None,
        "host": raw["host_filter"],
        "pattern": pattern,
        "operation": _enum(Operation, raw["operation"], "operation", True),
        "permission": _enum(Permission, raw["permission_type"], "permission type", True),
    }
    name = raw["resource_name_filter"]
    types = [rtype] if rtype is not None or name is None else list(ResourceType)
    out = []
    for each in types:
        store_name = None
        if name is not None and each is not None:
            try:
                store_name = to_store_name(each, name)
            except _Invalid:
                if rtype is not None:
                    raise
                continue  # a name no entry of this type can have
        out.append(AclFilter(resource_type=each, resource_name=store_name, **common))
    return out


def entry_fields(entry: AclEntry) -> dict[str, Any]:
    """A stored entry as DeleteAcls' matching ACLs show it."""
    return {
        "error_code": 0,
        "error_message": None,
        "resource_type": int(entry.resource_type),
        "resource_name": to_kafka_name(entry.resource_type, entry.resource_name),
        "pattern_type": int(entry.pattern_type),
        "principal": str(entry.principal),
        "host": entry.host,
        "operation": int(entry.operation),
        "permission_type": int(entry.permission),
    }


# -- handlers ----------------------------------------------------------------------------


async def describe_acls(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """The entries the filter matches, grouped by resource pattern."""
    reply: dict[str, Any] = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "resources": [],
    }
    decision = call.check(ctx, Operation.DESCRIBE, CLUSTER)
    if not decision:
        reply.update(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                     error_message=decision.reason)  # fmt: skip
        return reply
    try:
        filters = parse_filter(call.request)
    except _Invalid as exc:
        reply.update(error_code=int(ErrorCode.INVALID_REQUEST), error_message=str(exc))
        return reply
    except _NoSuchType:
        return reply

    def run() -> list[AclEntry]:
        found: dict[AclEntry, None] = {}
        for each in filters:
            found.update(dict.fromkeys(ctx.access.acl_entries(each)))
        return list(found)

    grouped: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for entry in await asyncio.to_thread(run):
        key = (
            int(entry.resource_type),
            to_kafka_name(entry.resource_type, entry.resource_name),
            int(entry.pattern_type),
        )
        grouped.setdefault(key, []).append(
            {
                "principal": str(entry.principal),
                "host": entry.host,
                "operation": int(entry.operation),
                "permission_type": int(entry.permission),
            }
        )
    reply["resources"] = [
        {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
        for (t, n, p), acls in grouped.items()
    ]
    return reply


def _result(code: int = 0, message: str | None = None) -> dict[str, Any]:
    return {"error_code": int(code), "error_message": message}


async def create_acls(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Store the valid creations (one call to the accounts store); a result per creation."""
    creations = call.request["creations"]
    decision = call.check(ctx, Operation.ALTER, CLUSTER)
    if not decision:
        refused = _result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, decision.reason)
        return {"throttle_time_ms": 0, "results": [dict(refused) for _ in creations]}
    results: list[dict[str, Any]] = []
    valid: list[tuple[int, AclEntry]] = []
    for index, creation in enumerate(creations):
        try:
            valid.append((index, parse_entry(creation)))
            results.append(_result())
        except _Invalid as exc:
            results.append(_result(ErrorCode.INVALID_REQUEST, str(exc)))
    if valid:
        entries = [entry for _, entry in valid]
        refusals = await asyncio.to_thread(ctx.access.create_acls, call.subject, entries)
        for (index, _), refusal in zip(valid, refusals, strict=True):
            if refusal is not None:
                results[index] = _result(ErrorCode.INVALID_REQUEST, refusal)
    return {"throttle_time_ms": 0, "results": results}


async def delete_acls(ctx: KafkaContext, call: Call) -> dict[str, Any]:
    """Delete what each filter matches; per filter the entries deleted."""
    filters = call.request["filters"]
    decision = call.check(ctx, Operation.ALTER, CLUSTER)
    if not decision:
        refused = {
            **_result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, decision.reason),
            "matching_acls": [],
        }
        return {"throttle_time_ms": 0, "filter_results": [dict(refused) for _ in filters]}

    def run() -> list[dict[str, Any]]:
        out = []
        for raw in filters:
            try:
                selected = parse_filter(raw)
            except _Invalid as exc:
                out.append({**_result(ErrorCode.INVALID_REQUEST, str(exc)), "matching_acls": []})
                continue
            except _NoSuchType:
                selected = []
            gone: list[AclEntry] = []
            for each in selected:
                gone += ctx.access.delete_acls(call.subject, each)
            out.append({**_result(), "matching_acls": [entry_fields(e) for e in gone]})
        return out

    return {"throttle_time_ms": 0, "filter_results": await asyncio.to_thread(run)}
