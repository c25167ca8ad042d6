"""The broker runtime: what one broker process owns while it runs.

``runbroker`` starts it before serving and stops it after the server returns. Views and
consumers reach it through :func:`current` (``current().broker`` is the
:class:`~mqcore.broker.broker.Broker` every front end calls). It lives in this process only:
other processes (Celery workers, Spark) learn of progress through the store files and Redis,
never through it.

Start order: store (open, recover) → metadata (``<store>/config/*.json``) → broker → service
loops: the store's (:mod:`mqcore.services.inline`: reput, flush, cleanup, index; only
``follow`` with ``CAIRN_SERVICES=celery``) and the broker's (delay delivery, offsets persist,
always here: they write the CommitLog and persist in-memory offsets). Stop runs it
backwards: Redis subscriber, loops, broker (wakes long polls, persists offsets), store.

Cleanup and the audit log: the cleanup loop gets what consumers still need from the broker's
live offset tables (:func:`mqcore.services.consumed.committed_of`) and records every CommitLog
file it deletes in the audit log (action ``store.segment.delete``, user ``cleanup``, the
file's offset range in ``old`` and why in ``new``), through :meth:`BrokerRuntime.audit_deletion`.
In Celery mode the workers delete and journal the deletions in the store
(``mqcore.services.deletions``); the runtime's ``deletion_journal`` loop moves them into the
audit log every few seconds (and once at start, for anything left by an earlier run).

Tiered storage (spec 10, ``CAIRN_TIERED_BACKEND`` = ``posix`` or ``memory``; ``none`` by
default): the runtime builds a :class:`~mqcore.tiered.tiered_store.TieredMessageStore` over
the store and hands it to the Broker as its ``reader``, so every front end reads cold
offsets from the tier. Inline, the broker is the tier's writer (``tiered_upload`` and
``tiered_retention`` loops, ``<store>/locks/tiered`` held while running); with
``CAIRN_SERVICES=celery`` the workers upload and the broker only reads (``memory`` cannot
be shared with workers and is refused there).

* :attr:`BrokerRuntime.tiered`: the TieredMessageStore, or None when tiered storage is off.
* :meth:`BrokerRuntime.tier_status`: one dict per tiered queue, sorted by topic and queue
  id, with the keys ``topic``, ``queue_id``, ``tier_min_offset`` (first offset the tier
  holds), ``dispatch_offset`` (end of what was copied to the tier, uploaded or not),
  ``commit_offset`` (end of what is durably uploaded; reads are served below it),
  ``local_max_offset``, ``lag`` (= local max − commit: messages not uploaded yet) and
  ``size_bytes`` (bytes the queue takes in the tier: flat CommitLog, flat ConsumeQueue and
  key index). An empty list when tiered storage is off.

Accounts: :attr:`BrokerRuntime.access` is the accounts store as an
:class:`~mqcore.access.backend.AccessBackend` (:class:`accounts.access.DjangoAccess`: users,
tokens, SCRAM credentials, ACL entries, lockouts, the audit log), the one every front end
authorizes with; the Kafka listener takes it from here. ``runbroker`` reads the ACL entries
(:meth:`BrokerRuntime.warm_access`) before serving, so that the event loop never waits on the
database for them.

Tests build their own runtime over a ``tmp_path`` store and :func:`install` it; :func:`reset`
forgets it again.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

import mqcore
from cairn import env
from mqcore.access.backend import AccessBackend
from mqcore.broker import delay_delivery, offsets_persist
from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.clock import Clock, SystemClock
from mqcore.metadata import Metadata
from mqcore.services import consumed, deletions, inline
from mqcore.services import tiered as tiered_services
from mqcore.services.config import (
    ServicesConfig,
    services_config_from_env,
    store_config_from_env,
)
from mqcore.services.result import StepResult
from mqcore.services.runner import ServiceLoop
from mqcore.store import MessageStore, StoreConfig
from mqcore.store.files.service_lock import ServiceLock
from mqcore.store.files.space import is_disk_full
from mqcore.tiered.config import BACKENDS, TieredConfig, tiered_config_from_env
from mqcore.tiered.storage import TieredStorage, make_backend
from mqcore.tiered.tiered_store import TieredMessageStore

log = logging.getLogger(__name__)

#: How often journaled deletions (Celery mode) are moved into the audit log.
AUDIT_JOURNAL_INTERVAL_S = 5.0


@dataclass
class BrokerRuntime:
    store_dir: Path
    services_mode: str
    started_monotonic: float = field(default_factory=time.monotonic)
    started_at_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    flush_mode: str = "async"
    running: bool = False
    store: MessageStore | None = None
    metadata: Metadata | None = None
    broker: Broker | None = None
    loops: list[ServiceLoop] = field(default_factory=list)
    #: Store settings; None builds them from settings (flush mode, broker and cluster names).
    store_config: StoreConfig | None = None
    #: Broker settings; None builds them from settings (``AUTO_CREATE_TOPICS``).
    broker_config: BrokerConfig | None = None
    #: How services run; None reads the CAIRN_* variables (mode from ``services_mode``).
    services_config: ServicesConfig | None = None
    clock: Clock = field(default_factory=SystemClock)
    #: Celery mode: the Redis subscriber that wakes the follow loop (None otherwise).
    subscriber: Any = None
    #: Tier backend (``none``, ``posix``, ``memory``); None reads CAIRN_TIERED_BACKEND.
    tiered_backend: str | None = None
    #: POSIX backend root; None reads CAIRN_TIERED_PATH ($CAIRN_DATA_DIR/tiered).
    tiered_path: Path | None = None
    #: Tier settings; None reads the CAIRN_TIERED_* variables.
    tiered_config: TieredConfig | None = None
    #: The reads-through-the-tier store while running with tiered storage on, else None.
    tiered: TieredMessageStore | None = None
    _tier_lock: ServiceLock | None = None

    @property
    def access(self) -> AccessBackend:
        """The accounts store (module docstring); made without touching the database."""
        from accounts.access import django_access

        return django_access()

    def warm_access(self) -> None:
        """Read the ACL entries now (blocking), not on the first check."""
        self.access.authorizer()

    def start(self) -> None:
        """Open (and recover) the store, load the metadata, start the broker and the
        in-process services.

        Raises:
            StoreLockedError: another broker holds the store.
            OSError: a config file exists but cannot be read.
        """
        cfg = settings.CAIRN
        self.store_dir.mkdir(parents=True, exist_ok=True)
        store_config = self.store_config or store_config_from_env(
            os.environ,
            StoreConfig(
                flush=self.flush_mode,  # type: ignore[arg-type]
                broker_name=cfg.get("BROKER_NAME", "broker-a"),
                cluster_name=cfg.get("CLUSTER_NAME", "DefaultCluster"),
            ),
        )
        services = dataclasses.replace(
            self.services_config or services_config_from_env(os.environ),
            mode=self.services_mode,  # type: ignore[arg-type]
        )
        broker_config = self.broker_config or BrokerConfig(
            auto_create_topics=bool(cfg["AUTO_CREATE_TOPICS"])
        )
        store = MessageStore(
            self.store_dir,
            store_config,
            clock=self.clock,
            role=inline.store_role(self.services_mode),
        )
        store.open()
        self.store = store
        try:
            if store.recovery is not None:
                log.info("%s", store.recovery.summary())
            self.metadata = Metadata(
                self.store_dir / "config",
                self.clock,
                broker_name=broker_config.broker_name or store_config.broker_name,
                cluster_name=broker_config.cluster_name or store_config.cluster_name,
            )
            self.metadata.load(store)  # reconciles and reports a recovered config file
            self.tiered = self._open_tier(store, store_config)
            self.broker = Broker(
                store, self.metadata, config=broker_config, clock=self.clock, reader=self.tiered
            )
            self.broker.start()
            self._start_services(store, self.broker, services)
        except BaseException:
            self.stop()
            raise
        self.started_monotonic = time.monotonic()
        self.running = True
        log.info(
            "broker runtime started (store %s, services %s)", self.store_dir, self.services_mode
        )

    def _open_tier(
        self, store: MessageStore, store_config: StoreConfig
    ) -> TieredMessageStore | None:
        """The tier over ``store`` per the settings, or None when it is off.

        Raises:
            ValueError: a bad CAIRN_TIERED_* value, or ``memory`` with Celery services.
        """
        kind = (self.tiered_backend or env.get("CAIRN_TIERED_BACKEND", "none")).lower()
        if kind not in BACKENDS:
            raise ValueError(f"CAIRN_TIERED_BACKEND: expected one of {', '.join(BACKENDS)}")
        celery = self.services_mode == "celery"
        if kind == "memory" and celery:
            raise ValueError("CAIRN_TIERED_BACKEND=memory cannot be shared with Celery workers")
        path = self.tiered_path or tiered_dir()
        backend = make_backend(
            kind, path, store_config.cluster_name, store_config.broker_name, os.environ
        )
        if backend is None:
            return None
        config = self.tiered_config or tiered_config_from_env(os.environ)
        tier = TieredStorage(backend, self.store_dir, config, clock=self.clock, readonly=celery)
        if not celery:
            lock = ServiceLock(self.store_dir, tiered_services.LOCK_NAME)
            if not lock.try_acquire():
                raise RuntimeError(f"tiered storage of {self.store_dir} is held by {lock.holder()}")
            self._tier_lock = lock
        log.info("tiered storage: %s backend at %s (%s)", kind, path, config.read_strategy.name)
        return TieredMessageStore(store, tier)

    def tier_status(self) -> list[dict[str, Any]]:
        """Per-queue tier progress (module docstring); empty when tiered storage is off."""
        tiered = self.tiered
        return [q.as_dict() for q in tiered.queue_status()] if tiered is not None else []

    def _start_services(
        self, store: MessageStore, broker: Broker, services: ServicesConfig
    ) -> None:
        """The store's loops (:func:`mqcore.services.inline.build_service_loops`: reput,
        flush, cleanup and index inline; only ``follow`` in Celery mode, woken by the
        workers' Redis events), then the broker's own, which always run here: delay
        delivery writes to the CommitLog, whose one writer is this process, and consumer
        offsets live in its memory."""
        tier = self.tiered.tier if self.tiered is not None else None
        metadata = broker.metadata
        loops = inline.build_service_loops(
            store,
            services=services,
            clock=self.clock,
            tier=tier if store.role == "standalone" else None,
            topic_attributes=tiered_services.topic_attributes_of(metadata.topics),
            needed=lambda: consumed.lowest_needed(store, consumed.committed_of(store, metadata)),
            on_delete=self.audit_deletion,
        )
        follow = [loop for loop in loops if loop.name == "follow"]
        self._drain_deletions(store)  # journaled by workers, or by an earlier run
        loops += [
            ServiceLoop(
                "deletion_journal",
                lambda: self._drain_deletions(store),
                AUDIT_JOURNAL_INTERVAL_S,
            ),
            ServiceLoop(
                "delay_delivery",
                lambda: delay_delivery.step(broker),
                delay_delivery.DEFAULT_INTERVAL_S,
            ),
            ServiceLoop(
                "offsets_persist",
                lambda: offsets_persist.step(broker),
                offsets_persist.DEFAULT_INTERVAL_S,
            ),
        ]
        self.loops = loops
        for loop in loops:
            loop.start()
        if follow and settings.REDIS_URL:
            from workers.events import wake_on_events

            self.subscriber = wake_on_events(settings.REDIS_URL, self.store_dir, follow)

    def audit_deletion(self, deletion: deletions.Deletion) -> None:
        """Record a CommitLog file deleted by cleanup in the audit log. Called on the
        cleanup and ``deletion_journal`` threads (each has its own database connection).

        Raises:
            Exception: the database refused it (the caller logs it; the deletion was logged
                at WARNING already, with the same facts).
        """
        from accounts import audit

        audit.record(
            None,
            "store.segment.delete",
            "commitlog_segment",
            deletion.file,
            old={"first_offset": deletion.first_offset, "end_offset": deletion.end_offset},
            new={"reason": deletion.reason, "deleted_ms": deletion.deleted_ms, **deletion.detail},
            username="cleanup",
        )

    def _drain_deletions(self, store: MessageStore) -> StepResult:
        count = deletions.drain_journal(store.root, self.audit_deletion)
        return StepResult("deletion_journal", progressed=False, detail={"recorded": count})

    def stop(self) -> None:
        """Stop the services, the broker (wakes long polls, persists offsets), then close the
        store (final dispatch, flush, checkpoint). Safe after a failed or partial start."""
        if self.subscriber is not None:
            self.subscriber.stop()
            self.subscriber = None
        for loop in reversed(self.loops):
            loop.stop()
        self.loops = []
        if self.broker is not None:
            try:
                self.broker.stop()
            except OSError as exc:  # the store must still close (flush, checkpoint, unlock)
                if not is_disk_full(exc):
                    raise
                log.error(
                    "consumer offsets not saved at stop, disk full (%s): consumers re-read "
                    "from the last saved offsets (at most %.0f s of progress)",
                    exc, offsets_persist.DEFAULT_INTERVAL_S,
                )  # fmt: skip
            self.broker = None
        if self.metadata is not None:
            self.metadata = None
        self.tiered = None
        if self._tier_lock is not None:
            self._tier_lock.release()
            self._tier_lock = None
        if self.store is not None:
            self.store.close()
            self.store = None
        self.running = False
        log.info("broker runtime stopped")

    def service_states(self) -> dict[str, dict[str, Any]]:
        """Each service's state by name: the in-process loops' (``ServiceState.as_dict()``
        plus ``lag_bytes``) and, in Celery mode, what the workers last recorded."""
        store = self.store
        if store is None:
            return {}
        services: dict[str, dict[str, Any]] = inline.services_status(store, self.loops)["services"]
        return services

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "version": mqcore.__version__,
            "store_dir": str(self.store_dir),
            "uptime_s": round(time.monotonic() - self.started_monotonic, 3),
            "started_at": self.started_at_ms,
            "services": self.services_mode,
            "running": self.running,
            "pid": os.getpid(),
            "store": self._store_health(),
            "tiered": self.tiered is not None,
            "service_state": self.service_states(),
        }

    def _store_health(self) -> dict[str, Any] | None:
        store = self.store
        if store is None:
            return None
        return {
            "commitlog_min_offset": store.commit_log.min_offset,
            "commitlog_max_offset": store.commit_log.max_offset,
            "flushed_offset": store.commit_log.flushed_offset,
            "reput_offset": store.reput_offset,
            "dispatch_behind_bytes": store.dispatch_behind_bytes,
            "flush": store.config.flush,
            "writable": store.writable,
        }


def tiered_dir() -> Path:
    """CAIRN_TIERED_PATH, default ``$CAIRN_DATA_DIR/tiered``."""
    raw = env.get("CAIRN_TIERED_PATH", "")
    return Path(raw).resolve() if raw else env.data_dir() / "tiered"


_lock = threading.Lock()
_current: BrokerRuntime | None = None


def install(runtime: BrokerRuntime) -> None:
    """Make ``runtime`` the process's runtime (tests: one over a ``tmp_path`` store)."""
    global _current
    with _lock:
        _current = runtime


def reset() -> None:
    """Forget the process's runtime; the next :func:`current` builds one from settings.
    The caller stops the old one first."""
    global _current
    with _lock:
        _current = None


def current() -> BrokerRuntime:
    """The process's runtime, created from settings on first use."""
    global _current
    with _lock:
        if _current is None:
            cfg = settings.CAIRN
            _current = BrokerRuntime(
                store_dir=Path(cfg["STORE_DIR"]),
                services_mode=cfg["SERVICES"],
                flush_mode=cfg["FLUSH"],
            )
        return _current
