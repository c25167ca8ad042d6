"""The live trace over WebSocket (``/ws/trace/``): stored matches first, then new ones live.

Protocol (README "Live trace protocol"): the client sends a subscribe frame
``{"topic", "key", "begin", "end", "limit"?}``; the server answers with

* ``progress`` frames: ``phase`` ``backfill`` (``topics_done`` of ``topics_total``, ``matched``,
  ``limit``), then ``live`` (once backfill is over, then as a heartbeat);
* ``message`` frames: ``source`` ``stored`` (backfill), ``live`` (stored after the
  subscription) or ``update`` (a message already sent whose per-group consume state changed);
* ``done`` when ``end`` is set and has passed: everything stored up to it was sent; the
  server then closes the socket (code 1000);
* ``error`` frames: a refused subscribe frame (``bad_request``, ``forbidden``, ``not_found``,
  ``unavailable``; send another), or a read that failed (``broker_error``; the
  subscription goes on).

A new subscribe frame replaces the current subscription. The connection needs a logged-in
user with a role (session cookie, or ``?token=``): others are refused at the handshake
(close code 4401 unauthenticated, 4403 no role); the page that opens it must be the
broker's own or one of ``CAIRN_ALLOWED_ORIGINS`` (:mod:`webui.origin`).

A user sees only topics it may read (``READ`` on the topic, decided by
:func:`webui.access.authorizer` for the subject ``(user, role, client address, "trace")``):
a subscription to another topic gets ``forbidden`` (whether or not the topic exists), a
topic-less one follows only readable topics, and every message is checked again before it is
sent, so an ACL change applies to a running subscription within a refresh (a topic
subscription that loses its right gets ``forbidden`` and stops). The role is read again on
each subscribe frame; a user who lost it is closed with 4403.

Live events come from :mod:`webui.bridge` through the channel layer: the consumer joins the
group of each topic it follows (one group per topic) and its ``store_appended`` handler
matches key and time, then reads the message and its trace through the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib.auth import get_user_model

from accounts.roles import role_of
from cairn import runtime
from mqcore.access.authorizer import CachedDecisions, Decision, Subject
from mqcore.access.model import WILDCARD, Operation, Resource
from mqcore.broker import Broker
from mqcore.errors import MQError, NotFoundError
from webui import access
from webui.bridge import bridge, group_for_topic
from webui.trace import (
    TraceRequest,
    TraceRequestError,
    backfill,
    error_frame,
    message_payload,
    parse_request,
    traceable_topics,
)

log = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NO_ROLE = 4403
HEARTBEAT_S = 20.0
REFRESH_S = 3.0  # per-group consume states of recent messages
TOPICS_REFRESH_S = 5.0  # topic-less traces pick up new topics
RECENT_TRACKED = 20
RECENT_MAX_AGE_MS = 15 * 60 * 1000
SEEN_MAX = 10_000
SETTLE_MAX_S = 2.0  # after end: wait this long at most for dispatch to catch up


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _current_role(user: Any) -> str | None:
    """The user's role as the database has it now (None: gone, disabled or no role)."""
    return role_of(get_user_model().objects.filter(pk=user.pk).first())


class TraceConsumer(AsyncWebsocketConsumer):
    """One browser tab or program following one key (see the module docstring)."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        role = await database_sync_to_async(role_of)(user)
        if role is None:
            await self.close(code=CLOSE_NO_ROLE)
            return
        client = self.scope.get("client") or (WILDCARD, 0)
        self._user = user
        self._decisions = CachedDecisions(Subject(user.get_username(), role, client[0], "trace"))
        self._request: TraceRequest | None = None
        self._topics: list[str] = []
        self._buffer: list[dict[str, Any]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._recent: OrderedDict[str, tuple[int, str]] = OrderedDict()
        self._matched = 0
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "_topics"):
            await self._unsubscribe()

    # -- frames in ------------------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            request = parse_request(text_data)
        except TraceRequestError as exc:
            await self._send(exc.frame())
            return
        await self._unsubscribe()
        if not await self._refresh_role():
            return
        await self._subscribe(request)

    # -- authorization --------------------------------------------------------------------------

    async def _refresh_role(self) -> bool:
        """Read the user's role again; close with 4403 if it is gone (module docstring)."""
        role = await database_sync_to_async(_current_role)(self._user)
        if role is None:
            await self._send(error_frame("forbidden", "your account is disabled or has no role"))
            await self.close(code=CLOSE_NO_ROLE)
            return False
        if role != self._decisions.subject.role:
            subject = self._decisions.subject
            self._decisions = CachedDecisions(
                Subject(subject.user, role, subject.host, subject.front_end)
            )
        return True

    def _read_decision(self, topic: str) -> Decision:
        return self._decisions.check(access.authorizer(), Operation.READ, Resource.topic(topic))

    def _may_read(self, topic: Any) -> bool:
        return isinstance(topic, str) and self._read_decision(topic).allowed

    def _forbidden(self, topic: str) -> dict[str, Any]:
        reason = self._read_decision(topic).reason
        return error_frame("forbidden", reason, field="topic", rule="forbidden")

    async def _send(self, frame: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(frame, separators=(",", ":")))

    # -- subscription -------------------------------------------------------------------------

    async def _subscribe(self, request: TraceRequest) -> None:
        rt = runtime.current()
        broker = rt.broker
        if broker is None or not broker.started or rt.store is None:
            await self._send(error_frame("unavailable", "the broker is not running; retry later"))
            return
        if request.topic is not None and not self._may_read(request.topic):
            await self._send(self._forbidden(request.topic))
            return
        try:
            if request.topic is not None:
                await asyncio.to_thread(broker.admin.get_topic, request.topic)
                topics = [request.topic]
            else:
                topics = await asyncio.to_thread(traceable_topics, broker)
        except NotFoundError as exc:
            await self._send(error_frame("not_found", str(exc), field="topic", rule="not_found"))
            return
        except MQError as exc:
            await self._send(error_frame("broker_error", str(exc)))
            return
        self._request = request
        self._buffer = []
        self._matched = 0
        self._truncated = False
        self._seen.clear()
        self._recent.clear()
        bridge.attach(rt.store)
        await self._follow(topics)
        self._task = asyncio.create_task(self._run(request, broker))

    async def _follow(self, topics: list[str]) -> None:
        """Follow ``topics`` too, those the user may read."""
        new = [t for t in topics if t not in self._topics and self._may_read(t)]
        bridge.watch(new)
        self._topics.extend(new)
        for topic in new:
            await self.channel_layer.group_add(group_for_topic(topic), self.channel_name)

    async def _unsubscribe(self) -> None:
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        topics, self._topics = self._topics, []
        bridge.unwatch(topics)
        for topic in topics:
            await self.channel_layer.group_discard(group_for_topic(topic), self.channel_name)
        self._request = None
        self._buffer = None

    async def _run(self, request: TraceRequest, broker: Broker) -> None:
        try:
            await self._backfill(request, broker)
            buffered, self._buffer = self._buffer or [], None
            for event in buffered:
                await self._deliver(event, broker)
            await self._send(self._progress("live"))
            await self._live(request, broker)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported to the client, socket stays open
            log.exception("live trace failed")
            await self._send(error_frame("broker_error", f"{type(exc).__name__}: {exc}"))

    def _progress(self, phase: str, **extra: Any) -> dict[str, Any]:
        request = self._request
        return {
            "type": "progress",
            "phase": phase,
            "matched": self._matched,
            "limit": request.limit if request else 0,
            "now": _now_ms(),
            **extra,
        }

    async def _backfill(self, request: TraceRequest, broker: Broker) -> None:
        topics = list(self._topics)
        remaining = request.limit
        truncated = False
        await self._send(self._progress("backfill", topics_done=0, topics_total=len(topics)))
        for done, topic in enumerate(topics, start=1):
            if remaining <= 0:
                truncated = True
                break
            try:
                payloads = await asyncio.to_thread(self._stored, broker, request, topic, remaining)
            except MQError as exc:
                await self._send(error_frame("broker_error", f"{topic}: {exc}"))
                payloads = []
            if len(payloads) >= remaining:
                truncated = True
            for payload in payloads[:remaining]:
                await self._emit(payload, "stored")
            remaining -= len(payloads)
            await self._send(
                self._progress(
                    "backfill", topics_done=done, topics_total=len(topics), truncated=truncated
                )
            )
        self._truncated = truncated

    @staticmethod
    def _stored(
        broker: Broker, request: TraceRequest, topic: str, limit: int
    ) -> list[dict[str, Any]]:
        return [message_payload(m, broker) for m in backfill(broker, request, topic, limit)]

    async def _live(self, request: TraceRequest, broker: Broker) -> None:
        last_beat = last_refresh = last_topics = time.monotonic()
        while True:
            now_ms = broker.clock.now_ms()
            if request.end is not None and now_ms > request.end:
                await self._settle(broker)
                await self._send(
                    {
                        "type": "done",
                        "reason": "range_end",
                        "matched": self._matched,
                        "truncated": self._truncated,
                    }
                )
                await self.close(code=1000)
                return
            wait = 0.5
            if request.end is not None:
                wait = min(wait, max(0.01, (request.end - now_ms + 1) / 1000))
            await asyncio.sleep(wait)
            now = time.monotonic()
            if now - last_refresh >= REFRESH_S:
                last_refresh = now
                if request.topic is not None and not self._may_read(request.topic):
                    await self._send(self._forbidden(request.topic))
                    await self._unsubscribe()
                    return
                await self._refresh(broker)
            if request.topic is None and now - last_topics >= TOPICS_REFRESH_S:
                last_topics = now
                with contextlib.suppress(MQError):
                    await self._follow(await asyncio.to_thread(traceable_topics, broker))
            if now - last_beat >= HEARTBEAT_S:
                last_beat = now
                await self._send(self._progress("live"))

    async def _settle(self, broker: Broker) -> None:
        """Give reput a moment to dispatch records stored before ``end``."""
        deadline = time.monotonic() + SETTLE_MAX_S
        await asyncio.sleep(0.05)
        while broker.store.dispatch_behind_bytes > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)  # let the bridge's last events reach this consumer

    # -- live events ----------------------------------------------------------------------------

    async def store_appended(self, event: dict[str, Any]) -> None:
        """A record was dispatched on a followed topic (from :mod:`webui.bridge`)."""
        request = self._request
        if request is None or not request.matches(event) or not self._may_read(event.get("topic")):
            return
        if self._buffer is not None:
            self._buffer.append(event)
            return
        broker = runtime.current().broker
        if broker is None:
            await self._send(error_frame("unavailable", "the broker stopped"))
            return
        await self._deliver(event, broker)

    async def _deliver(self, event: dict[str, Any], broker: Broker) -> None:
        offset_msg_id = str(event.get("offset_msg_id", ""))
        if offset_msg_id in self._seen:
            return
        try:
            payload = await asyncio.to_thread(self._load, broker, offset_msg_id)
        except Exception as exc:  # noqa: BLE001 - the socket survives a failed read
            log.warning("live trace: reading %s failed: %s", offset_msg_id, exc)
            await self._send(
                error_frame("broker_error", f"reading message {offset_msg_id} failed: {exc}")
            )
            return
        if payload is not None:
            await self._emit(payload, "live")

    @staticmethod
    def _load(broker: Broker, offset_msg_id: str) -> dict[str, Any] | None:
        message = broker.get_message(offset_msg_id)
        return message_payload(message, broker) if message is not None else None

    async def _emit(self, payload: dict[str, Any], source: str) -> None:
        if not self._may_read(payload["topic"]):
            return  # the right to read it was taken away since the subscription began
        offset_msg_id = payload["offset_msg_id"]
        if source != "update":
            if offset_msg_id in self._seen:
                return
            self._seen[offset_msg_id] = None
            if len(self._seen) > SEEN_MAX:
                self._seen.popitem(last=False)
            self._matched += 1
        self._recent[offset_msg_id] = (
            payload["store_timestamp"],
            json.dumps(payload["trace"]["groups"], sort_keys=True),
        )
        self._recent.move_to_end(offset_msg_id)
        while len(self._recent) > RECENT_TRACKED:
            self._recent.popitem(last=False)
        await self._send({"type": "message", "source": source, "message": payload})

    async def _refresh(self, broker: Broker) -> None:
        """Re-read the consume state of recent messages; send those that changed."""
        cutoff = broker.clock.now_ms() - RECENT_MAX_AGE_MS
        wanted = [(oid, groups) for oid, (ts, groups) in self._recent.items() if ts >= cutoff]
        if not wanted:
            return
        try:
            fresh = await asyncio.to_thread(
                lambda: [(oid, groups, self._load(broker, oid)) for oid, groups in wanted]
            )
        except Exception as exc:  # noqa: BLE001
            log.warning("live trace: refreshing consume states failed: %s", exc)
            return
        for _oid, groups, payload in fresh:
            if payload is None:
                continue
            if json.dumps(payload["trace"]["groups"], sort_keys=True) != groups:
                await self._emit(payload, "update")
