"""What the handlers share for authorization and audit (issue 18): the resources a Kafka
request names, Kafka's "allowed on some resource of a type" check, and audit entries.

**Resource names are the store's.** The authorizer, REST, the console and the live trace
all name topics and groups as the store does (``orders|eu``; group ids escaped as
``mapping.to_store_group`` does), so one ACL entry means the same thing from every front
end. The Kafka listener translates at its boundary, as it does for every other request:
a check of Kafka topic ``orders.eu`` asks about ``orders|eu``, and Kafka's ACL APIs
(``acls.py``) translate entry names both ways. The translation is character by character,
so a prefix stays a prefix (``orders.`` ↔ ``orders|``).

**The checks** are :meth:`Call.check`: the connection's :class:`CachedDecisions` answers
a repeated (operation, resource) with one dict lookup (the produce path checks once per
topic per request, never per record) and asks the authorizer again only after the ACL
entries change.

**Audit.** :func:`audit` writes one entry with the connection's subject (principal,
address, front end ``kafka``) through ``ctx.access``; it blocks (a database write), so
handlers call it from their worker thread (``asyncio.to_thread``), never on the loop.
Action names are the REST API's (``topic.create``, ``topic.update``, ``topic.delete``,
``group.offsets.commit``); ACL changes are audited by the backend itself.
"""

from __future__ import annotations

import functools
from typing import Any

from mqcore.access.authorizer import ROLE_DEFAULTS, Authorizer, Subject
from mqcore.access.model import (
    WILDCARD,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
)

from .. import mapping
from .context import Call, KafkaContext

CLUSTER = Resource.cluster()
AUTHORIZATION_FAILED = "Authorization failed."  # Kafka's message for refused requests


def topic_resource(kafka_name: str) -> Resource:
    """The resource a (valid) Kafka topic name stands for."""
    return store_topic_resource(mapping.to_store_topic(kafka_name))


@functools.lru_cache(maxsize=4096)
def store_topic_resource(store_name: str) -> Resource:
    """The resource of a store topic; the same object for the same name while cached, so
    the connection's decision cache finds it by identity, without a dataclass comparison
    (with a fresh ``Resource`` a produce request's check cost ~4.8 us against ~1 us, on
    the machine of ``bench/kafka_acl.py``'s figures). Thread-safe."""
    return Resource(ResourceType.TOPIC, store_name)


def group_resource(group_id: str) -> Resource:
    """The resource a Kafka group id stands for (escaped as the store names it)."""
    return Resource(ResourceType.GROUP, mapping.escape_group(group_id))


def may_on_some(
    authorizer: Authorizer, subject: Subject, operation: Operation, rtype: ResourceType
) -> bool:
    """Whether ``subject`` may do ``operation`` on at least one resource of ``rtype``
    (Kafka's ``authorizeByResourceType``, KIP-679: an idempotent producer needs
    IDEMPOTENT_WRITE on the cluster *or* WRITE on some topic).

    True when the subject's role allows it on every resource of the type, or an allow
    entry does on some name, unless deny entries cover everything that allow covers: a
    literal ``*`` deny covers all; a literal deny covers the same literal name; a prefixed
    deny covers the names and prefixes it is a prefix of.
    """
    principals, host = subject.principals(), subject.host
    allows: list[AclEntry] = []
    denies: list[AclEntry] = []
    for entry in authorizer.entries:
        if (
            entry.resource_type is rtype
            and entry.applies_to(principals, host)
            and entry.covers(operation)
        ):
            (denies if entry.permission is Permission.DENY else allows).append(entry)
    if any(d.pattern_type is PatternType.LITERAL and d.resource_name == WILDCARD for d in denies):
        return False
    role = ROLE_DEFAULTS.get(subject.role or "", {})
    if operation in role.get(rtype, frozenset()):
        return True
    return any(not _denied(allow, denies) for allow in allows)


def _denied(allow: AclEntry, denies: list[AclEntry]) -> bool:
    """Whether ``denies`` take away every resource ``allow`` grants."""
    name = allow.resource_name
    for deny in denies:
        if deny.pattern_type is PatternType.PREFIXED:
            if name.startswith(deny.resource_name):
                return True
        elif deny.resource_name == name and allow.pattern_type is PatternType.LITERAL:
            return True
    return False


def audit(
    ctx: KafkaContext,
    call: Call,
    action: str,
    target_type: str,
    target: str,
    old: Any = None,
    new: Any = None,
) -> None:
    """One audit entry for a change ``call`` made. Blocks: call from a worker thread."""
    ctx.access.audit(call.subject, action, target_type, target, old, new)
