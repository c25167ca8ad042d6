"""One schema per Kafka API: request and response fields with per-field version ranges.

Transcribed from Kafka's ``common/message/*.json`` (names in snake_case) for every API of
``kafka-protocol.md`` section 2.1, over the versions that table advertises. ApiVersions
also carries its flexible v3 (the layout clients probe with) so the compact encoding and
tagged fields are exercised by real data, although v3 is not advertised.

:data:`API_VERSIONS_TABLE` is the table of section 2.1, with SASL widened as issue 18 asks
(SaslHandshake 0-1, SaslAuthenticate 0-2): it is what the connection accepts, and what
ApiVersions advertises except Produce, advertised from v0 and refused below v3 as Kafka 4
does (:data:`ADVERTISED_MIN_VERSIONS`). :data:`OPTIONAL_APIS` are the rows the spec
marks optional (SASL, CreatePartitions); a server that does not implement them passes a
table without them to ``KafkaServerConnection``.

The functions that use these schemas (``decode_request``, ``encode_response``, headers,
frames) live in ``messages.py``; message bodies decode to ``dict[str, Any]`` as described
in ``structs.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from enum import IntEnum

from mqcore.errors import RemoteProtocolError

from .errors import ErrorCode
from .structs import Decoder, Encoder, Field, array, compile_struct
from .structs import field as f


class ApiKey(IntEnum):
    """Kafka API keys used by this listener."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    OFFSET_DELETE = 47


@dataclass(frozen=True, slots=True)
class ApiSchema:
    """Request and response fields of one API.

    ``flexible_from`` is the first flexible version (``None``: never flexible), taken
    from the "flex from" column of section 2.1 so header versions are right even for a
    version we only ever see as a probe.
    """

    api_key: int
    name: str
    min_version: int
    max_version: int
    flexible_from: int | None
    request: tuple[Field, ...]
    response: tuple[Field, ...]
    _cache: dict[tuple[int, bool], tuple[Decoder, Encoder]] = dc_field(
        default_factory=dict, compare=False, repr=False
    )

    def is_flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from

    def request_header_version(self, version: int) -> int:
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions responses always use header v0 so a client can read the error
        # before it knows which versions the broker speaks (KIP-511).
        if self.api_key == ApiKey.API_VERSIONS:
            return 0
        return 1 if self.is_flexible(version) else 0

    def codec(self, version: int, response: bool) -> tuple[Decoder, Encoder]:
        """The compiled ``(decode, encode)`` of the request or response at ``version``."""
        key = (version, response)
        found = self._cache.get(key)
        if found is None:
            fields = self.response if response else self.request
            where = f"{self.name}{'Response' if response else 'Request'} v{version}"
            found = compile_struct(fields, version, self.is_flexible(version), where)
            self._cache[key] = found
        return found


def _api(
    key: ApiKey,
    versions: tuple[int, int],
    flexible_from: int | None,
    request: list[Field],
    response: list[Field],
) -> ApiSchema:
    name = "".join(part.capitalize() for part in key.name.split("_"))
    lo, hi = versions
    return ApiSchema(int(key), name, lo, hi, flexible_from, tuple(request), tuple(response))


_THROTTLE = "throttle_time_ms"
_NO_AUTH_OPS = -(2**31)  # INT32_MIN: "authorized operations not requested"

PRODUCE = _api(ApiKey.PRODUCE, (3, 7), 9, [
    f("transactional_id", "string", "3+", nullable="0+", default=None),
    f("acks", "int16"),
    f("timeout_ms", "int32"),
    array("topic_data", [
        f("name", "string"),
        array("partition_data", [
            f("index", "int32"),
            f("records", "records", nullable="0+"),
        ]),
    ]),
], [
    array("responses", [
        f("name", "string"),
        array("partition_responses", [
            f("index", "int32"),
            f("error_code", "int16"),
            f("base_offset", "int64"),
            f("log_append_time_ms", "int64", "2+", default=-1),
            f("log_start_offset", "int64", "5+", default=-1),
        ]),
    ]),
    f(_THROTTLE, "int32", "1+"),
])  # fmt: skip

FETCH = _api(ApiKey.FETCH, (4, 11), 12, [
    f("replica_id", "int32", default=-1),
    f("max_wait_ms", "int32"),
    f("min_bytes", "int32"),
    f("max_bytes", "int32", "3+", default=0x7FFFFFFF),
    f("isolation_level", "int8", "4+"),
    f("session_id", "int32", "7+"),
    f("session_epoch", "int32", "7+", default=-1),
    array("topics", [
        f("topic", "string"),
        array("partitions", [
            f("partition", "int32"),
            f("current_leader_epoch", "int32", "9+", default=-1),
            f("fetch_offset", "int64"),
            f("log_start_offset", "int64", "5+", default=-1),
            f("partition_max_bytes", "int32"),
        ]),
    ]),
    array("forgotten_topics_data", [
        f("topic", "string"),
        f("partitions", "[]int32"),
    ], "7+"),
    f("rack_id", "string", "11+"),
], [
    f(_THROTTLE, "int32", "1+"),
    f("error_code", "int16", "7+"),
    f("session_id", "int32", "7+"),
    array("responses", [
        f("topic", "string"),
        array("partitions", [
            f("partition_index", "int32"),
            f("error_code", "int16"),
            f("high_watermark", "int64"),
            f("last_stable_offset", "int64", "4+", default=-1),
            f("log_start_offset", "int64", "5+", default=-1),
            array("aborted_transactions", [
                f("producer_id", "int64"),
                f("first_offset", "int64"),
            ], "4+", nullable="4+"),
            f("preferred_read_replica", "int32", "11+", default=-1),
            f("records", "records", nullable="0+"),
        ]),
    ]),
])  # fmt: skip

LIST_OFFSETS = _api(ApiKey.LIST_OFFSETS, (1, 3), 6, [
    f("replica_id", "int32", default=-1),
    f("isolation_level", "int8", "2+"),
    array("topics", [
        f("name", "string"),
        array("partitions", [
            f("partition_index", "int32"),
            f("current_leader_epoch", "int32", "4+", default=-1),
            f("timestamp", "int64"),
            f("max_num_offsets", "int32", "0", default=1),
        ]),
    ]),
], [
    f(_THROTTLE, "int32", "2+"),
    array("topics", [
        f("name", "string"),
        array("partitions", [
            f("partition_index", "int32"),
            f("error_code", "int16"),
            f("old_style_offsets", "[]int64", "0"),
            f("timestamp", "int64", "1+", default=-1),
            f("offset", "int64", "1+", default=-1),
            f("leader_epoch", "int32", "4+", default=-1),
        ]),
    ]),
])  # fmt: skip

METADATA = _api(ApiKey.METADATA, (0, 5), 9, [
    array("topics", [f("name", "string")], nullable="1+"),
    f("allow_auto_topic_creation", "bool", "4+", default=True),
], [
    f(_THROTTLE, "int32", "3+"),
    array("brokers", [
        f("node_id", "int32"),
        f("host", "string"),
        f("port", "int32"),
        f("rack", "string", "1+", nullable="1+", default=None),
    ]),
    f("cluster_id", "string", "2+", nullable="2+", default=None),
    f("controller_id", "int32", "1+", default=-1),
    array("topics", [
        f("error_code", "int16"),
        f("name", "string"),
        f("is_internal", "bool", "1+"),
        array("partitions", [
            f("error_code", "int16"),
            f("partition_index", "int32"),
            f("leader_id", "int32"),
            f("leader_epoch", "int32", "7+", default=-1),
            f("replica_nodes", "[]int32"),
            f("isr_nodes", "[]int32"),
            f("offline_replicas", "[]int32", "5+"),
        ]),
    ]),
])  # fmt: skip

OFFSET_COMMIT = _api(ApiKey.OFFSET_COMMIT, (2, 3), 8, [
    f("group_id", "string"),
    f("generation_id", "int32", "1+", default=-1),
    f("member_id", "string", "1+"),
    f("retention_time_ms", "int64", "2-4", default=-1),
    array("topics", [
        f("name", "string"),
        array("partitions", [
            f("partition_index", "int32"),
            f("committed_offset", "int64"),
            f("commit_timestamp", "int64", "1", default=-1),
            f("committed_metadata", "string", nullable="0+"),
        ]),
    ]),
], [
    f(_THROTTLE, "int32", "3+"),
    array("topics", [
        f("name", "string"),
        array("partitions", [
            f("partition_index", "int32"),
            f("error_code", "int16"),
        ]),
    ]),
])  # fmt: skip

OFFSET_FETCH = _api(ApiKey.OFFSET_FETCH, (1, 3), 6, [
    f("group_id", "string"),
    array("topics", [
        f("name", "string"),
        f("partition_indexes", "[]int32"),
    ], nullable="2+"),
], [
    f(_THROTTLE, "int32", "3+"),
    array("topics", [
        f("name", "string"),
        array("partitions", [
            f("partition_index", "int32"),
            f("committed_offset", "int64"),
            f("metadata", "string", nullable="0+"),
            f("error_code", "int16"),
        ]),
    ]),
    f("error_code", "int16", "2+"),
])  # fmt: skip

FIND_COORDINATOR = _api(ApiKey.FIND_COORDINATOR, (0, 2), 3, [
    f("key", "string"),
    f("key_type", "int8", "1+"),
], [
    f(_THROTTLE, "int32", "1+"),
    f("error_code", "int16"),
    f("error_message", "string", "1+", nullable="1+", default=None),
    f("node_id", "int32"),
    f("host", "string"),
    f("port", "int32"),
])  # fmt: skip

JOIN_GROUP = _api(ApiKey.JOIN_GROUP, (0, 5), 6, [
    f("group_id", "string"),
    f("session_timeout_ms", "int32"),
    f("rebalance_timeout_ms", "int32", "1+", default=-1),
    f("member_id", "string"),
    f("group_instance_id", "string", "5+", nullable="5+", default=None),
    f("protocol_type", "string"),
    array("protocols", [
        f("name", "string"),
        f("metadata", "bytes"),
    ]),
], [
    f(_THROTTLE, "int32", "2+"),
    f("error_code", "int16"),
    f("generation_id", "int32", default=-1),
    f("protocol_name", "string"),
    f("leader", "string"),
    f("member_id", "string"),
    array("members", [
        f("member_id", "string"),
        f("group_instance_id", "string", "5+", nullable="5+", default=None),
        f("metadata", "bytes"),
    ]),
])  # fmt: skip

HEARTBEAT = _api(ApiKey.HEARTBEAT, (0, 3), 4, [
    f("group_id", "string"),
    f("generation_id", "int32"),
    f("member_id", "string"),
    f("group_instance_id", "string", "3+", nullable="3+", default=None),
], [
    f(_THROTTLE, "int32", "1+"),
    f("error_code", "int16"),
])  # fmt: skip

LEAVE_GROUP = _api(ApiKey.LEAVE_GROUP, (0, 1), 4, [
    f("group_id", "string"),
    f("member_id", "string", "0-2"),
], [
    f(_THROTTLE, "int32", "1+"),
    f("error_code", "int16"),
])  # fmt: skip

SYNC_GROUP = _api(ApiKey.SYNC_GROUP, (0, 3), 4, [
    f("group_id", "string"),
    f("generation_id", "int32"),
    f("member_id", "string"),
    f("group_instance_id", "string", "3+", nullable="3+", default=None),
    array("assignments", [
        f("member_id", "string"),
        f("assignment", "bytes"),
    ]),
], [
    f(_THROTTLE, "int32", "1+"),
    f("error_code", "int16"),
    f("assignment", "bytes"),
])  # fmt: skip

DESCRIBE_GROUPS = _api(ApiKey.DESCRIBE_GROUPS, (0, 4), 5, [
    f("groups", "[]string"),
    f("include_authorized_operations", "bool", "3+"),
], [
    f(_THROTTLE, "int32", "1+"),
    array("groups", [
        f("error_code", "int16"),
        f("group_id", "string"),
        f("group_state", "string"),
        f("protocol_type", "string"),
        f("protocol_data", "string"),
        array("members", [
            f("member_id", "string"),
            f("group_instance_id", "string", "4+", nullable="4+", default=None),
            f("client_id", "string"),
            f("client_host", "string"),
            f("member_metadata", "bytes"),
            f("member_assignment", "bytes"),
        ]),
        f("authorized_operations", "int32", "3+", default=_NO_AUTH_OPS),
    ]),
])  # fmt: skip

LIST_GROUPS = _api(ApiKey.LIST_GROUPS, (0, 2), 3, [], [
    f(_THROTTLE, "int32", "1+"),
    f("error_code", "int16"),
    array("groups", [
        f("group_id", "string"),
        f("protocol_type", "string"),
    ]),
])  # fmt: skip

# v0 and v1 have one layout; after a v0 handshake the SASL tokens travel as bare
# size-prefixed frames without Kafka headers (``connection.py``), after v1 in SaslAuthenticate.
SASL_HANDSHAKE = _api(ApiKey.SASL_HANDSHAKE, (0, 1), None, [
    f("mechanism", "string"),
], [
    f("error_code", "int16"),
    f("mechanisms", "[]string"),
])  # fmt: skip

API_VERSIONS = _api(ApiKey.API_VERSIONS, (0, 3), 3, [
    f("client_software_name", "string", "3+"),
    f("client_software_version", "string", "3+"),
], [
    f("error_code", "int16"),
    array("api_keys", [
        f("api_key", "int16"),
        f("min_version", "int16"),
        f("max_version", "int16"),
    ]),
    f(_THROTTLE, "int32", "1+"),
    array("supported_features", [
        f("name", "string"),
        f("min_version", "int16"),
        f("max_version", "int16"),
    ], "3+", tag=0, tagged="3+"),
    f("finalized_features_epoch", "int64", "3+", default=-1, tag=1, tagged="3+"),
    array("finalized_features", [
        f("name", "string"),
        f("max_version_level", "int16"),
        f("min_version_level", "int16"),
    ], "3+", tag=2, tagged="3+"),
    f("zk_migration_ready", "bool", "3+", tag=3, tagged="3+"),
])  # fmt: skip

CREATE_TOPICS = _api(ApiKey.CREATE_TOPICS, (0, 4), 5, [
    array("topics", [
        f("name", "string"),
        f("num_partitions", "int32"),
        f("replication_factor", "int16"),
        array("assignments", [
            f("partition_index", "int32"),
            f("broker_ids", "[]int32"),
        ]),
        array("configs", [
            f("name", "string"),
            f("value", "string", nullable="0+"),
        ]),
    ]),
    f("timeout_ms", "int32", default=60000),
    f("validate_only", "bool", "1+"),
], [
    f(_THROTTLE, "int32", "2+"),
    array("topics", [
        f("name", "string"),
        f("error_code", "int16"),
        f("error_message", "string", "1+", nullable="0+", default=None),
    ]),
])  # fmt: skip

DELETE_TOPICS = _api(ApiKey.DELETE_TOPICS, (0, 3), 4, [
    f("topic_names", "[]string", "0-5"),
    f("timeout_ms", "int32"),
], [
    f(_THROTTLE, "int32", "1+"),
    array("responses", [
        f("name", "string"),
        f("error_code", "int16"),
    ]),
])  # fmt: skip

INIT_PRODUCER_ID = _api(ApiKey.INIT_PRODUCER_ID, (0, 1), 2, [
    f("transactional_id", "string", nullable="0+", default=None),
    f("transaction_timeout_ms", "int32"),
], [
    f(_THROTTLE, "int32"),
    f("error_code", "int16"),
    f("producer_id", "int64", default=-1),
    f("producer_epoch", "int16"),
])  # fmt: skip

DESCRIBE_CONFIGS = _api(ApiKey.DESCRIBE_CONFIGS, (0, 2), 4, [
    array("resources", [
        f("resource_type", "int8"),
        f("resource_name", "string"),
        f("configuration_keys", "[]string", nullable="0+", default=None),
    ]),
    f("include_synonyms", "bool", "1+"),
], [
    f(_THROTTLE, "int32"),
    array("results", [
        f("error_code", "int16"),
        f("error_message", "string", nullable="0+", default=None),
        f("resource_type", "int8"),
        f("resource_name", "string"),
        array("configs", [
            f("name", "string"),
            f("value", "string", nullable="0+", default=None),
            f("read_only", "bool"),
            f("is_default", "bool", "0"),
            f("config_source", "int8", "1+", default=-1),
            f("is_sensitive", "bool"),
            array("synonyms", [
                f("name", "string"),
                f("value", "string", nullable="0+", default=None),
                f("source", "int8"),
            ], "1+"),
        ]),
    ]),
])  # fmt: skip

SASL_AUTHENTICATE = _api(ApiKey.SASL_AUTHENTICATE, (0, 2), 2, [
    f("auth_bytes", "bytes"),
], [
    f("error_code", "int16"),
    f("error_message", "string", nullable="0+", default=None),
    f("auth_bytes", "bytes"),
    f("session_lifetime_ms", "int64", "1+"),
])  # fmt: skip

CREATE_PARTITIONS = _api(ApiKey.CREATE_PARTITIONS, (0, 1), 2, [
    array("topics", [
        f("name", "string"),
        f("count", "int32"),
        array("assignments", [f("broker_ids", "[]int32")], nullable="0+"),
    ]),
    f("timeout_ms", "int32"),
    f("validate_only", "bool"),
], [
    f(_THROTTLE, "int32"),
    array("results", [
        f("name", "string"),
        f("error_code", "int16"),
        f("error_message", "string", nullable="0+", default=None),
    ]),
])  # fmt: skip

# -- ACL APIs (29-31): Kafka's own ACL administration (handlers/acls.py) -----------------
# Schemas of v0-3 (v1 adds pattern types, KIP-290; v2 is flexible; v3 only adds the USER
# resource type); v0-1 advertised: kafka-python 3.0 (which knows 1-3), librdkafka and
# kafkajs all send v1 then.

DESCRIBE_ACLS = _api(ApiKey.DESCRIBE_ACLS, (0, 3), 2, [
    f("resource_type_filter", "int8"),
    f("resource_name_filter", "string", nullable="0+"),
    f("pattern_type_filter", "int8", "1+", default=3),
    f("principal_filter", "string", nullable="0+"),
    f("host_filter", "string", nullable="0+"),
    f("operation", "int8"),
    f("permission_type", "int8"),
], [
    f(_THROTTLE, "int32"),
    f("error_code", "int16"),
    f("error_message", "string", nullable="0+", default=None),
    array("resources", [
        f("resource_type", "int8"),
        f("resource_name", "string"),
        f("pattern_type", "int8", "1+", default=3),
        array("acls", [
            f("principal", "string"),
            f("host", "string"),
            f("operation", "int8"),
            f("permission_type", "int8"),
        ]),
    ]),
])  # fmt: skip

CREATE_ACLS = _api(ApiKey.CREATE_ACLS, (0, 3), 2, [
    array("creations", [
        f("resource_type", "int8"),
        f("resource_name", "string"),
        f("resource_pattern_type", "int8", "1+", default=3),
        f("principal", "string"),
        f("host", "string"),
        f("operation", "int8"),
        f("permission_type", "int8"),
    ]),
], [
    f(_THROTTLE, "int32"),
    array("results", [
        f("error_code", "int16"),
        f("error_message", "string", nullable="0+", default=None),
    ]),
])  # fmt: skip

DELETE_ACLS = _api(ApiKey.DELETE_ACLS, (0, 3), 2, [
    array("filters", [
        f("resource_type_filter", "int8"),
        f("resource_name_filter", "string", nullable="0+"),
        f("pattern_type_filter", "int8", "1+", default=3),
        f("principal_filter", "string", nullable="0+"),
        f("host_filter", "string", nullable="0+"),
        f("operation", "int8"),
        f("permission_type", "int8"),
    ]),
], [
    f(_THROTTLE, "int32"),
    array("filter_results", [
        f("error_code", "int16"),
        f("error_message", "string", nullable="0+", default=None),
        array("matching_acls", [
            f("error_code", "int16"),
            f("error_message", "string", nullable="0+", default=None),
            f("resource_type", "int8"),
            f("resource_name", "string"),
            f("pattern_type", "int8", "1+", default=3),
            f("principal", "string"),
            f("host", "string"),
            f("operation", "int8"),
            f("permission_type", "int8"),
        ]),
    ]),
])  # fmt: skip

# -- Group deletion (42, 47): DeleteGroups v0-1 (v2 is flexible), OffsetDelete v0 ----------

DELETE_GROUPS = _api(ApiKey.DELETE_GROUPS, (0, 1), 2, [
    f("groups_names", "[]string"),
], [
    f(_THROTTLE, "int32"),
    array("results", [
        f("group_id", "string"),
        f("error_code", "int16"),
    ]),
])  # fmt: skip

OFFSET_DELETE = _api(ApiKey.OFFSET_DELETE, (0, 0), None, [
    f("group_id", "string"),
    array("topics", [
        f("name", "string"),
        array("partitions", [f("partition_index", "int32")]),
    ]),
], [
    f("error_code", "int16"),
    f(_THROTTLE, "int32"),
    array("topics", [
        f("name", "string"),
        array("partitions", [
            f("partition_index", "int32"),
            f("error_code", "int16"),
        ]),
    ]),
])  # fmt: skip

SCHEMAS: dict[int, ApiSchema] = {
    s.api_key: s
    for s in (
        PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH,
        FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS,
        LIST_GROUPS, SASL_HANDSHAKE, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS,
        INIT_PRODUCER_ID, DESCRIBE_CONFIGS, SASL_AUTHENTICATE, CREATE_PARTITIONS,
        DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, DELETE_GROUPS, OFFSET_DELETE,
    )
}  # fmt: skip

# kafka-protocol.md section 2.1, "advertise" column: api_key -> (min, max); SASL per issue 18.
API_VERSIONS_TABLE: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 7),
    ApiKey.FETCH: (4, 11),
    ApiKey.LIST_OFFSETS: (1, 3),
    ApiKey.METADATA: (0, 5),
    ApiKey.OFFSET_COMMIT: (2, 3),
    ApiKey.OFFSET_FETCH: (1, 3),
    ApiKey.FIND_COORDINATOR: (0, 2),
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 1),
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.DESCRIBE_GROUPS: (0, 4),
    ApiKey.LIST_GROUPS: (0, 2),
    ApiKey.SASL_HANDSHAKE: (0, 1),  # issue 18: v0 (bare tokens) too
    ApiKey.API_VERSIONS: (0, 2),
    ApiKey.CREATE_TOPICS: (0, 4),
    ApiKey.DELETE_TOPICS: (0, 3),
    ApiKey.INIT_PRODUCER_ID: (0, 1),
    ApiKey.DESCRIBE_CONFIGS: (0, 2),
    ApiKey.SASL_AUTHENTICATE: (0, 2),  # issue 18: v2 (flexible) too
    ApiKey.CREATE_PARTITIONS: (0, 1),
    # ACL administration (section 2.1's ACL rows): v1 is what every client sends.
    ApiKey.DESCRIBE_ACLS: (0, 1),
    ApiKey.CREATE_ACLS: (0, 1),
    ApiKey.DELETE_ACLS: (0, 1),
    # Group deletion (issue 21): DeleteGroups v1 is what kafkajs and librdkafka send.
    ApiKey.DELETE_GROUPS: (0, 1),
    ApiKey.OFFSET_DELETE: (0, 0),
}

# Produce v0-2 (message formats v0 and v1) are advertised but refused, as Kafka 4 does
# (KAFKA-18659): older librdkafka releases (Debian's kcat: 2.0.2) compress only when ApiVersions says
# Produce v0 is supported, and clients use the highest version both sides know, so nobody
# sends v0-2 to a broker that offers v3+. :func:`advertised_versions` lowers the minimum; the
# connection still accepts only :data:`API_VERSIONS_TABLE` and closes on a v0-2 request.
ADVERTISED_MIN_VERSIONS: dict[int, int] = {ApiKey.PRODUCE: 0}


def advertised_versions(accepted: Mapping[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """What ApiVersions tells clients for an ``accepted`` table: the same spans, with the
    minimums of :data:`ADVERTISED_MIN_VERSIONS` lowered."""
    return {
        key: (min(lo, ADVERTISED_MIN_VERSIONS.get(key, lo)), hi)
        for key, (lo, hi) in accepted.items()
    }


OPTIONAL_APIS: frozenset[int] = frozenset(
    {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.CREATE_PARTITIONS}
)


def schema_for(api_key: int) -> ApiSchema:
    """The schema of ``api_key``.

    Raises:
        RemoteProtocolError: the key is not one this listener knows (INVALID_REQUEST).
    """
    found = SCHEMAS.get(api_key)
    if found is None:
        raise RemoteProtocolError(f"unknown API key {api_key}", ErrorCode.INVALID_REQUEST)
    return found
