"""What every handler receives: the listener's settings and shared state, and the call."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from mqcore.access.authorizer import OPERATOR, CachedDecisions, Decision, Subject
from mqcore.access.backend import AccessBackend, StaticAccess
from mqcore.access.model import Operation, Resource
from mqcore.broker.broker import Broker
from mqcore.clock import Clock, SystemClock
from mqcore.format.msgid import HostAddress
from mqcore.store.store import MessageStore

from ..arrivals import Arrivals
from ..batch_cache import BatchCache
from ..coordinator import DEFAULT_INITIAL_REBALANCE_DELAY_MS, GroupCoordinator
from ..flow import DEFAULT_IDLE_MS, DEFAULT_MAX_BUFFERED_BYTES
from ..framing import DEFAULT_MAX_FRAME_BYTES
from ..idempotence import ProducerStates
from ..read_ahead import ReadAhead


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    """Settings of the Kafka listener.

    Attributes:
        host, port: where to listen; port 0 picks a free port (tests).
        advertised_host, advertised_port: what Metadata and FindCoordinator tell clients
            to connect to; default the listen address (a wildcard host advertises
            127.0.0.1) and the bound port.
        node_id: this broker's Kafka node id (also the controller id).
        cluster_id: reported in Metadata v2+.
        auto_create_topics: a Metadata request for an unknown topic that allows
            auto-creation creates it (with ``default_partitions``).
        default_partitions: partitions for auto-created topics and CreateTopics with -1
            (Kafka's ``num.partitions`` default is 1).
        initial_rebalance_delay_ms: ``group.initial.rebalance.delay.ms``.
        max_frame_bytes: largest request (Kafka's ``socket.request.max.bytes``).
        max_buffered_bytes: request bytes all connections together may hold before the
            connections adding to them are paused (``CAIRN_KAFKA_MAX_BUFFERED_BYTES``,
            ``flow.py``).
        idle_ms: a connection with no request for this long is closed
            (``CAIRN_KAFKA_IDLE_MS``, Kafka's ``connections.max.idle.ms``); 0 never.
        max_fetch_records: most records one Fetch returns per partition (a bound on one
            Fetch's work; high enough that ``partition_max_bytes``, librdkafka's 1 MiB,
            decides for records of 60 bytes or more).
        fetch_cache_bytes: produced batches kept to answer fetches without a store
            read (``batch_cache.py``); 0 turns the cache off.
        tick_interval_s: how often the group coordinator's timers are checked.
        auth: ``CAIRN_KAFKA_AUTH``: ``required`` (every connection authenticates with SASL
            or a TLS client certificate before any other request), ``optional``
            (unauthenticated connections act as ``anonymous_role``) or ``none`` (no SASL).
        anonymous_role: the role of unauthenticated connections under ``optional`` and
            ``none`` (``CAIRN_KAFKA_ANONYMOUS_ROLE``); empty: no role (ACL entries only).
        reauth_ms: KIP-368 session lifetime of a SASL login (``CAIRN_KAFKA_REAUTH_MS``,
            Kafka's ``connections.max.reauth.ms``); a connection that does not
            re-authenticate in time is closed at its next request. 0: never.
    """

    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    advertised_port: int | None = None
    node_id: int = 0
    cluster_id: str = "cairn"
    auto_create_topics: bool = False
    default_partitions: int = 1
    initial_rebalance_delay_ms: int = DEFAULT_INITIAL_REBALANCE_DELAY_MS
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES
    idle_ms: int = DEFAULT_IDLE_MS
    max_fetch_records: int = 16_384
    fetch_cache_bytes: int = 64 * 1024 * 1024
    tick_interval_s: float = 0.05
    auth: str = "optional"
    anonymous_role: str = OPERATOR
    reauth_ms: int = 0


@dataclass
class KafkaContext:
    """Shared state of one listener. The coordinator is used from the event loop only;
    ``producers``, ``batch_cache``, ``read_ahead`` and ``arrivals`` are thread-safe; ``commit_metadata``
    sees single dict operations from worker threads (atomic under the GIL).
    ``arrivals`` listens to the store's dispatches from creation until :meth:`close`, which
    also stops ``read_ahead``'s thread (Fetch's store-path batches built ahead).
    ``producers`` is the store's (``idempotence.py``: loaded from ``<store>/kafka/`` and
    settled against the CommitLog by the first context of a store, shared by the others
    while they are open, closed with the last one)."""

    broker: Broker
    config: ListenerConfig
    clock: Clock = field(default_factory=SystemClock)
    # Users, ACL entries and the audit log (the Django side's in the broker; in memory in tests).
    access: AccessBackend = field(default_factory=StaticAccess)
    coordinator: GroupCoordinator = field(init=False)
    producers: ProducerStates = field(init=False)
    batch_cache: BatchCache = field(init=False)
    read_ahead: ReadAhead[Any] = field(init=False)
    arrivals: Arrivals = field(init=False)
    versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    advertised: tuple[str, int] = ("127.0.0.1", 9092)
    # (group id, topic, partition) -> commit metadata (RocketMQ's offsets have no slot).
    commit_metadata: dict[tuple[str, str, int], str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.coordinator = GroupCoordinator(
            self.clock, initial_rebalance_delay_ms=self.config.initial_rebalance_delay_ms
        )
        self.producers = _SHARED.acquire(self.broker.store, self.clock)
        self.batch_cache = BatchCache(self.config.fetch_cache_bytes)
        self.read_ahead = ReadAhead()
        self.arrivals = Arrivals(self.broker.store)
        self.broker.store.add_arrivals_listener(self.arrivals.on_arrivals)

    def close(self) -> None:
        """Stop listening to dispatches and reading ahead (the listener is closing)."""
        with contextlib.suppress(ValueError):  # closed twice
            self.broker.store.remove_arrivals_listener(self.arrivals.on_arrivals)
            _SHARED.release(self.broker.store)
        self.read_ahead.close()


class _SharedProducerStates:
    """One :class:`ProducerStates` per open store, however many contexts use it (two
    would each own the journal's files). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_store: weakref.WeakKeyDictionary[MessageStore, tuple[ProducerStates, int]] = (
            weakref.WeakKeyDictionary()
        )

    def acquire(self, store: MessageStore, clock: Clock) -> ProducerStates:
        with self._lock:
            found = self._by_store.get(store)
            states = found[0] if found is not None else ProducerStates.open(store, clock)
            self._by_store[store] = (states, (found[1] if found is not None else 0) + 1)
            return states

    def release(self, store: MessageStore) -> None:
        with self._lock:
            found = self._by_store.get(store)
            if found is None:
                return
            states, users = found
            if users > 1:
                self._by_store[store] = (states, users - 1)
                return
            del self._by_store[store]
        states.close()


_SHARED = _SharedProducerStates()


@dataclass(frozen=True, slots=True)
class Call:
    """One decoded request and where it came from."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    request: dict[str, Any]
    peer: HostAddress | None = None
    # Who the connection is (authenticated by SASL or a client certificate, or anonymous)
    # and its cache of authorization decisions; one per connection, shared by its calls.
    decisions: CachedDecisions = field(
        default_factory=lambda: CachedDecisions(Subject(None, OPERATOR, front_end="kafka"))
    )

    @property
    def client_host(self) -> str:
        """The peer as Kafka shows it in DescribeGroups (``/127.0.0.1``)."""
        return f"/{self.peer.ip}" if self.peer is not None else ""

    @property
    def subject(self) -> Subject:
        return self.decisions.subject

    def check(self, ctx: KafkaContext, operation: Operation, resource: Resource) -> Decision:
        """Whether this connection's subject may do ``operation`` on ``resource`` now."""
        return self.decisions.check(ctx.access.authorizer(), operation, resource)


@dataclass(frozen=True, slots=True)
class Later:
    """A response that becomes ready later. The server goes on with the connection's
    next requests meanwhile; the connection still sends the responses in request order.
    Produce uses it to wait for its records to become readable without holding up the
    producer's next batches."""

    response: Awaitable[dict[str, Any]]
