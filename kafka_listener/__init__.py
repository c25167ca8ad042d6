"""Cairn's Kafka wire-protocol listener: a sans-I/O codec, handlers over the Broker, a group
coordinator and an asyncio server (``runbroker`` starts it; README "Kafka clients").

Modules, bottom up (each depends only on those above it):

=====================  =====================================================================
``errors``             :class:`ErrorCode` (Kafka's int16 codes) and :func:`error_code_for`
``primitives``         :class:`Reader` / :class:`Writer` for ints, varints, strings, arrays,
                       tagged fields
``structs``            declarative fields with version ranges, compiled per version
``schemas``            one :class:`ApiSchema` per API, :data:`API_VERSIONS_TABLE`
``messages``           ``encode_*`` / ``decode_*`` of bodies, headers and frames
``framing``            :class:`FrameBuffer`: size-prefixed frames with a size guard
``flow``               :class:`BufferBudget`: the cap on request bytes held by all
                       connections (who is paused), and idle connections
``compression``        gzip / snappy (xerial and raw) / lz4 / zstd for record batches
``records``            record batch v2: split, CRC-32C, decode, encode
``connection``         :class:`KafkaServerConnection`: events in, ordered responses out
``sasl``               :class:`SaslSession`: a connection's login state (PLAIN, SCRAM), the
                       listener policy's gate, session lifetimes (sans I/O)
``mapping``            Kafka names and records ↔ store topics, groups and messages
``plain_records``      produce's fast path: plain records straight into store messages
``group_state``        group states, members and groups (the coordinator's data)
``coordinator``        :class:`GroupCoordinator`: the classic consumer-group state machine
``producer_journal``   the producer state's journal and snapshot entries (sans I/O)
``producer_files``     their files: generations, the journal writer, snapshots
``producer_recovery``  the journal settled against the recovered CommitLog at start
``idempotence``        producer ids and per-partition sequence state, kept across restarts
``batch_cache``        produced batches kept to answer fetches without a store read
``arrivals``           fetch long polls and produce acks parked until reput dispatches,
                       woken once per burst
``handlers``           one function per API, turning requests into Broker calls
``login``              runs a session's look-ups against the accounts store, off the loop
``server``             :class:`KafkaListener`: ``asyncio.start_server`` around the above
=====================  =====================================================================

Messages are plain dicts (see ``structs``); records are :class:`Record` tuples. Every
error the peer causes is a :class:`mqcore.errors.RemoteProtocolError` whose
``error_code`` is the Kafka code to answer with (or to log before closing); misuse on
our side is a :class:`mqcore.errors.LocalProtocolError`.
"""

from .compression import Compression
from .connection import ConnectionClosed, Event, KafkaServerConnection, RequestReceived
from .errors import MQERROR_TO_KAFKA, ErrorCode, error_code_for
from .framing import DEFAULT_MAX_FRAME_BYTES, FrameBuffer
from .messages import (
    RequestHeader,
    decode_request,
    decode_request_header,
    decode_response,
    decode_response_frame,
    encode_request,
    encode_request_frame,
    encode_request_header,
    encode_response,
    encode_response_header,
)
from .primitives import Reader, Writer
from .records import (
    BatchHeader,
    RawBatch,
    Record,
    RecordBatch,
    decode_batch,
    decode_batches,
    decode_records,
    encode_batch,
    patch_base_offset,
    set_log_append_time,
    split_batches,
    verify_crc,
)
from .schemas import API_VERSIONS_TABLE, OPTIONAL_APIS, SCHEMAS, ApiKey, ApiSchema, schema_for

__all__ = [
    "API_VERSIONS_TABLE",
    "DEFAULT_MAX_FRAME_BYTES",
    "MQERROR_TO_KAFKA",
    "OPTIONAL_APIS",
    "SCHEMAS",
    "ApiKey",
    "ApiSchema",
    "BatchHeader",
    "Compression",
    "ConnectionClosed",
    "ErrorCode",
    "Event",
    "FrameBuffer",
    "KafkaServerConnection",
    "RawBatch",
    "Reader",
    "Record",
    "RecordBatch",
    "RequestHeader",
    "RequestReceived",
    "Writer",
    "decode_batch",
    "decode_batches",
    "decode_records",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "decode_response_frame",
    "encode_batch",
    "encode_request",
    "encode_request_frame",
    "encode_request_header",
    "encode_response",
    "encode_response_header",
    "error_code_for",
    "patch_base_offset",
    "schema_for",
    "set_log_append_time",
    "split_batches",
    "verify_crc",
]
