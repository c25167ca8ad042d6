"""Progress events over Redis pub/sub, between the workers and the broker (Celery mode).

A worker publishes on the store's channel when its reput dispatched something, when a
cleanup deleted files and when a rebuilt index was installed. The broker subscribes and
wakes its follow loop, which reads what changed from the store files: the event carries no
state the broker relies on, so a lost event only costs the loop's poll interval
(``CAIRN_FOLLOW_INTERVAL_MS``), never correctness.

Channel: ``cairn:<16 hex of sha256(store path)>:progress``; payload: JSON
``{"event": "reput"|"cleanup"|"index", ...figures}``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import redis

log = logging.getLogger(__name__)


class Wakeable(Protocol):
    def wake(self) -> None: ...


def channel(store_root: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256(os.path.realpath(store_root).encode()).hexdigest()[:16]
    return f"cairn:{digest}:progress"


class Publisher:
    """Publishes one store's events. Thread-safe (redis-py connections are pooled)."""

    def __init__(self, redis_url: str, store_root: str | os.PathLike[str]) -> None:
        self._client = redis.Redis.from_url(redis_url)
        self.channel = channel(store_root)

    def publish(self, event: str, **fields: Any) -> None:
        """Best effort: a Redis hiccup is logged, never raised (the files are the truth)."""
        try:
            self._client.publish(self.channel, json.dumps({"event": event, **fields}))
        except redis.RedisError as exc:
            log.warning("progress event %s not published: %s", event, exc)

    def close(self) -> None:
        self._client.close()


class Subscriber:
    """A daemon thread that calls ``on_event(payload)`` for every event of one store."""

    def __init__(
        self,
        redis_url: str,
        store_root: str | os.PathLike[str],
        on_event: Callable[[dict[str, Any]], None],
    ) -> None:
        self._url = redis_url
        self.channel = channel(store_root)
        self._on_event = on_event
        self._stop = threading.Event()
        self.subscribed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cairn-progress-events", daemon=True)

    def start(self) -> Subscriber:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            client = redis.Redis.from_url(self._url)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(self.channel)
                self.subscribed.set()
                backoff = 0.1
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message is not None:
                        self._deliver(message.get("data"))
            except redis.RedisError as exc:
                self.subscribed.clear()
                log.warning("progress events: %s; retrying in %.1f s", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(5.0, backoff * 2)
            finally:
                pubsub.close()
                client.close()

    def _deliver(self, data: object) -> None:
        try:
            payload = json.loads(data) if isinstance(data, bytes | str) else {}
        except ValueError:
            payload = {}
        try:
            self._on_event(payload if isinstance(payload, dict) else {})
        except Exception:  # noqa: BLE001 - a listener bug must not kill the subscription
            log.exception("progress event listener failed")


def wake_on_events(
    redis_url: str, store_root: str | os.PathLike[str], loops: Iterable[Wakeable]
) -> Subscriber:
    """Broker side: wake ``loops`` (the follow loop) whenever a worker reports progress.
    Returns the started subscriber; call ``stop()`` at shutdown."""
    targets = list(loops)

    def wake(_payload: dict[str, Any]) -> None:
        for loop in targets:
            loop.wake()

    return Subscriber(redis_url, store_root, wake).start()
