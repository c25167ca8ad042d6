"""Request handlers: one function per Kafka API, turning decoded requests into Broker calls.

A handler is ``async def handler(ctx, call) -> dict | Later | None``: it gets the decoded
request (``call.request``, see ``schemas.py``) and returns the response body as a dict,
which the server hands to ``KafkaServerConnection.send_response``; a :class:`Later` when
the answer must wait but the connection's next requests need not (Produce waiting for its
records to be readable); None only for a Produce with acks=0 (no response at all). Handlers do no framing and no socket I/O. Blocking store work
runs in a worker thread (``asyncio.to_thread``); waits (Fetch long polls, JoinGroup,
SyncGroup) are awaited, so a waiting request never blocks other connections.

Errors: mqcore exceptions are translated into Kafka error codes at this boundary (per
partition, per topic or per group, wherever the API carries them) with
:func:`kafka_listener.errors.error_code_for`; an unexpected exception escapes to the
server, which logs it and closes that connection (clients reconnect and retry).

==================  ======================  =============================================
module              APIs                    over
==================  ======================  =============================================
``produce``         Produce, InitProducerId  Broker.send, idempotent-producer state,
                                            batch cache, arrivals
``fetch``           Fetch, ListOffsets      batch cache, Broker.pull, arrivals
``topics``          ApiVersions, Metadata,  Broker topics
                    CreateTopics,
                    DeleteTopics,
                    CreatePartitions,
                    DescribeConfigs
``groups``          FindCoordinator, Join,  GroupCoordinator, Broker offsets
                    Sync, Heartbeat, Leave,
                    OffsetCommit/Fetch,
                    Describe/ListGroups
``group_delete``    DeleteGroups,           GroupCoordinator, Broker groups and offsets
                    OffsetDelete
``acls``            Describe/Create/        the accounts store (``ctx.access``)
                    DeleteAcls
==================  ======================  =============================================

Authorization (``authz.py``): every handler checks the connection's subject with
:meth:`Call.check` before it acts, with Kafka's operations and error codes (Produce
WRITE topic, Fetch READ topic, Metadata lists only topics the subject may DESCRIBE, group
APIs READ group, admin APIs CREATE/DELETE/ALTER, DeleteGroups and OffsetDelete DELETE
group, ...); changes are audited there too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..schemas import API_VERSIONS_TABLE, ApiKey
from . import acls, fetch, group_delete, groups, produce, topics
from .context import Call, KafkaContext, Later, ListenerConfig

Handler = Callable[[KafkaContext, Call], Awaitable[dict[str, Any] | Later | None]]

HANDLERS: dict[int, Handler] = {
    ApiKey.PRODUCE: produce.produce,
    ApiKey.FETCH: fetch.fetch,
    ApiKey.LIST_OFFSETS: fetch.list_offsets,
    ApiKey.METADATA: topics.metadata,
    ApiKey.OFFSET_COMMIT: groups.offset_commit,
    ApiKey.OFFSET_FETCH: groups.offset_fetch,
    ApiKey.FIND_COORDINATOR: groups.find_coordinator,
    ApiKey.JOIN_GROUP: groups.join_group,
    ApiKey.HEARTBEAT: groups.heartbeat,
    ApiKey.LEAVE_GROUP: groups.leave_group,
    ApiKey.SYNC_GROUP: groups.sync_group,
    ApiKey.DESCRIBE_GROUPS: groups.describe_groups,
    ApiKey.LIST_GROUPS: groups.list_groups,
    ApiKey.API_VERSIONS: topics.api_versions,
    ApiKey.CREATE_TOPICS: topics.create_topics,
    ApiKey.DELETE_TOPICS: topics.delete_topics,
    ApiKey.INIT_PRODUCER_ID: produce.init_producer_id,
    ApiKey.DESCRIBE_CONFIGS: topics.describe_configs,
    ApiKey.CREATE_PARTITIONS: topics.create_partitions,
    # Kafka's ACL administration (issue 18).
    ApiKey.DESCRIBE_ACLS: acls.describe_acls,
    ApiKey.CREATE_ACLS: acls.create_acls,
    ApiKey.DELETE_ACLS: acls.delete_acls,
    # Deleting groups and their offsets (issue 21).
    ApiKey.DELETE_GROUPS: group_delete.delete_groups,
    ApiKey.OFFSET_DELETE: group_delete.offset_delete,
}


def supported_versions() -> dict[int, tuple[int, int]]:
    """The ApiVersions table this listener accepts and advertises: section 2.1's table
    minus the APIs it has no handler for (SASL)."""
    return {key: span for key, span in API_VERSIONS_TABLE.items() if key in HANDLERS}


async def dispatch(ctx: KafkaContext, call: Call) -> dict[str, Any] | Later | None:
    """Run the handler of ``call.api_key``.

    Returns:
        The response body; a :class:`Later` whose awaitable gives it (Produce); or None
        for a Produce with acks=0.

    Raises:
        KeyError: no handler (the connection only accepts keys of
            :func:`supported_versions`, so this means misuse).
    """
    return await HANDLERS[call.api_key](ctx, call)


__all__ = [
    "HANDLERS",
    "Call",
    "Handler",
    "KafkaContext",
    "Later",
    "ListenerConfig",
    "dispatch",
    "supported_versions",
]
