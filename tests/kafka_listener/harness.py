"""A real Broker plus a KafkaListener on a free loopback port, in a background event loop.

Used by the e2e tests (and handy in a REPL)::

    with RunningListener(tmp_path) as running:
        KafkaProducer(bootstrap_servers=running.bootstrap) ...

The services run as in the broker process (``mqcore.services.inline``: reput is woken by
every append), so a message is visible to fetches within milliseconds of being stored.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kafka_listener.handlers import ListenerConfig
from kafka_listener.server import KafkaListener
from mqcore.access.backend import AccessBackend
from mqcore.broker.broker import Broker
from mqcore.clock import Clock
from mqcore.services import inline
from mqcore.services.runner import ServiceLoop
from mqcore.store import StoreConfig

# Small files: tests create many stores and never fill them.
TEST_STORE_CONFIG = StoreConfig(
    commitlog_file_size=64 * 1024 * 1024,
    consume_queue_file_entries=100_000,
    index_hash_slots=50_000,
    index_max_entries=200_000,
)


class RunningListener:
    """Broker + reput loop + listener; ``start()``/``stop()`` or ``with``."""

    def __init__(
        self,
        root: Path,
        config: ListenerConfig | None = None,
        store_config: StoreConfig | None = None,
        *,
        access: AccessBackend | None = None,
        ssl_context: ssl.SSLContext | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.clock = clock
        self.root = root
        self.access = access
        self.ssl_context = ssl_context
        self.config = config or ListenerConfig(port=0, initial_rebalance_delay_ms=100)
        self.store_config = store_config or TEST_STORE_CONFIG
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.broker: Broker | None = None
        self.listener: KafkaListener | None = None
        self._loops: list[ServiceLoop] = []

    @property
    def port(self) -> int:
        assert self.listener is not None
        return self.listener.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def call[T](self, fn: Callable[[], Awaitable[T]], timeout_s: float = 30) -> T:
        """Run a coroutine on the listener's loop and wait for its result."""

        async def run() -> T:
            return await fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout_s)

    def start(self) -> RunningListener:
        broker = self.broker = Broker.open(self.root, self.store_config)
        self._loops = inline.build_service_loops(broker.store)  # reput (woken by appends), ...
        for loop in self._loops:
            loop.start()
        self._thread.start()
        self.listener = KafkaListener(
            broker, self.config, self.clock, access=self.access, ssl_context=self.ssl_context
        )
        self.call(self.listener.start)
        return self

    def stop(self) -> None:
        if self.listener is not None:
            self.call(self.listener.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
        for loop in self._loops:
            loop.stop()
        if self.broker is not None:
            self.broker.close()

    def __enter__(self) -> RunningListener:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
