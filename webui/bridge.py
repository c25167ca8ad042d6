"""From the store's dispatch to the channel layer: ``store.appended`` events, one group per topic.

The store calls its listeners for every record reput dispatches (``MessageStore.add_listener``,
on the reput thread). While a live trace is open :class:`TraceBridge` is such a listener: it
turns a :class:`~mqcore.format.record.DispatchRequest` into a ``store.appended`` event and
sends it to the topic's group, where the live-trace consumers (:mod:`webui.consumers`) pick
it up.

In Celery mode (``CAIRN_SERVICES=celery``) the workers dispatch and the broker's *follow* loop
calls the same store listeners as it catches up, so this bridge serves both modes. Other
processes may still publish events themselves (``CAIRN_REDIS_URL`` set). Contract (README
"Live trace protocol" repeats it):

* group: :func:`group_for_topic` ``(topic)``: ``trace.topic.<topic>`` with ``%`` written as
  ``.25`` and ``|`` as ``.7C`` (channel-layer group names allow only ``[A-Za-z0-9._-]``),
  or ``trace.topic-sha1.<40 hex digits of sha1(topic utf-8)>`` when that would be 100
  characters or longer;
* message: :func:`event_from_dispatch`: a flat dict of JSON scalars, ``type``
  ``store.appended`` (handled by ``TraceConsumer.store_appended``), with ``v`` (1), ``topic``,
  ``queue_id``, ``queue_offset``, ``commitlog_offset``, ``size``, ``store_timestamp`` (ms),
  ``keys`` (the raw space-separated KEYS, or null), ``uniq_key`` (msgId, or null), ``tags`` (or
  null) and ``offset_msg_id`` (store host + commit-log offset: how a consumer reads the record
  back through the broker);
* a process without a running event loop publishes with :func:`publish` (``async_to_sync``
  around ``get_channel_layer().group_send``), one call per batch.

In the broker process the bridge does not call ``async_to_sync`` per record: that would start
an event loop on the reput thread for every message, and Channels' in-memory layer (the
embedded default) must be used from the loop that serves the WebSockets. Instead the
listener appends the event to a queue and wakes the server's loop
(``call_soon_threadsafe``); one sender task there calls ``group_send`` in dispatch order.
Records of topics nobody in this process traces cost one dict lookup and are not sent, and
while no topic is traced at all the bridge is not a store listener (reput keeps its fast
path, which any per-record listener turns off).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections import Counter
from collections.abc import Iterable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import BaseChannelLayer, get_channel_layer

from mqcore.format.msgid import HostAddress, create_offset_msg_id
from mqcore.format.record import DispatchRequest
from mqcore.store.store import MessageStore

log = logging.getLogger(__name__)

EVENT_TYPE = "store.appended"
EVENT_VERSION = 1
GROUP_PREFIX = "trace.topic."
HASHED_GROUP_PREFIX = "trace.topic-sha1."
_MAX_GROUP_NAME = 99  # channel-layer group names must be shorter than 100 characters


def group_for_topic(topic: str) -> str:
    """The channel-layer group that receives a topic's ``store.appended`` events."""
    name = GROUP_PREFIX + topic.replace("%", ".25").replace("|", ".7C")
    if len(name) > _MAX_GROUP_NAME:
        name = HASHED_GROUP_PREFIX + hashlib.sha1(topic.encode("utf-8")).hexdigest()
    return name


def event_from_dispatch(request: DispatchRequest, store_host: HostAddress) -> dict[str, Any]:
    """The ``store.appended`` event of one dispatched record (see the module docstring)."""
    return {
        "type": EVENT_TYPE,
        "v": EVENT_VERSION,
        "topic": request.topic,
        "queue_id": request.queue_id,
        "queue_offset": request.queue_offset,
        "commitlog_offset": request.phys_offset,
        "size": request.size,
        "store_timestamp": request.store_timestamp,
        "keys": request.keys,
        "uniq_key": request.uniq_key,
        "tags": request.properties.get("TAGS") or None,
        "offset_msg_id": create_offset_msg_id(store_host, request.phys_offset),
    }


async def _send_all(layer: BaseChannelLayer, events: Iterable[dict[str, Any]]) -> None:
    for event in events:
        await layer.group_send(group_for_topic(event["topic"]), event)


def publish(events: Iterable[dict[str, Any]]) -> None:
    """Send events from a thread with no running event loop (e.g. a Celery reput task after
    ``reput_once``): one ``async_to_sync`` call for the whole batch."""
    batch = list(events)
    layer = get_channel_layer()
    if batch and layer is not None:
        async_to_sync(_send_all)(layer, batch)


class TraceBridge:
    """The broker process's listener: forwards dispatched records of traced topics to the
    channel layer on the server's event loop. Thread-safe; one per process (:data:`bridge`).

    Consumers call :meth:`attach` (idempotent) with the running store and their loop, and
    :meth:`watch` / :meth:`unwatch` for the topics they follow.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._store: MessageStore | None = None
        self._store_host = HostAddress("127.0.0.1", 0)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[list[dict[str, Any]]] | None = None
        self._sender: asyncio.Task[None] | None = None
        self._watched: Counter[str] = Counter()
        self._pending: list[dict[str, Any]] = []
        self._wake_scheduled = False
        self._listening = False
        #: Events sent, and events that could not be (for tests and the status page).
        self.sent = 0
        self.failed = 0

    # -- wiring (consumers, on the event loop) ------------------------------------------------

    def attach(self, store: MessageStore) -> None:
        """Serve ``store`` (moving off a previous one) and deliver on the running loop. The
        bridge is the store's listener only while some topic is watched (:meth:`watch`): a
        per-record listener moves reput off its fast path, so it is not left registered
        once the last live-trace client has gone."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._store is not store:
                self._set_listening(False)
                self._store = store
                self._store_host = store.config.store_host
                self._set_listening(bool(self._watched))
            if self._loop is not loop or self._sender is None or self._sender.done():
                self._loop = loop
                self._queue = asyncio.Queue()
                self._sender = loop.create_task(self._send_forever(self._queue))
                self._pending.clear()
                self._wake_scheduled = False

    def _set_listening(self, on: bool) -> None:
        """Register or remove :meth:`on_dispatch` on the current store (lock held)."""
        if self._listening == on or self._store is None:
            self._listening = on and self._store is not None
            return
        if on:
            self._store.add_listener(self.on_dispatch)
        else:
            try:
                self._store.remove_listener(self.on_dispatch)
            except ValueError:
                pass
        self._listening = on

    @property
    def listening(self) -> bool:
        """Whether the bridge is the store's listener now (tests, the status page)."""
        with self._lock:
            return self._listening

    def detach(self) -> None:
        """Stop listening (tests; the broker's own shutdown simply drops the store)."""
        with self._lock:
            self._set_listening(False)
            self._store = None
            if self._sender is not None and self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._sender.cancel)
            self._sender = None
            self._loop = None
            self._watched.clear()

    def watch(self, topics: Iterable[str]) -> None:
        with self._lock:
            self._watched.update(topics)
            self._set_listening(bool(self._watched))

    def unwatch(self, topics: Iterable[str]) -> None:
        with self._lock:
            self._watched.subtract(topics)
            self._watched = +self._watched  # drop zero counts
            self._set_listening(bool(self._watched))

    def watched(self) -> set[str]:
        with self._lock:
            return set(self._watched)

    # -- the listener (reput thread) ----------------------------------------------------------

    def on_dispatch(self, request: DispatchRequest) -> None:
        """Store listener: quick, never raises."""
        if request.topic not in self._watched:
            return
        try:
            event = event_from_dispatch(request, self._store_host)
            with self._lock:
                loop = self._loop
                if loop is None or loop.is_closed():
                    return
                self._pending.append(event)
                if self._wake_scheduled:
                    return
                self._wake_scheduled = True
            loop.call_soon_threadsafe(self._hand_over)
        except Exception:  # noqa: BLE001 - a listener must not break dispatch
            self.failed += 1
            log.exception("trace bridge: could not forward a dispatched record")

    def _hand_over(self) -> None:
        """On the loop: move the pending events to the sender, in order."""
        with self._lock:
            batch, self._pending = self._pending, []
            self._wake_scheduled = False
            queue = self._queue
        if batch and queue is not None:
            queue.put_nowait(batch)

    async def _send_forever(self, queue: asyncio.Queue[list[dict[str, Any]]]) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        while True:
            batch = await queue.get()
            for event in batch:
                try:
                    await layer.group_send(group_for_topic(event["topic"]), event)
                    self.sent += 1
                except Exception:  # noqa: BLE001 - keep the sender alive for the next ones
                    self.failed += 1
                    log.exception("trace bridge: group_send failed")


#: The process's bridge.
bridge = TraceBridge()
