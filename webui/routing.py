"""WebSocket routes (Channels). The live trace joins at ``/ws/trace/``.

:func:`websocket_application` is what ``cairn.asgi`` serves for the ``websocket`` protocol:
the routes wrapped in the origin check and the session/token authentication of
:mod:`webui.auth`.
"""

from typing import Any

from channels.routing import URLRouter
from django.urls import URLPattern, path

from webui.auth import websocket_stack
from webui.consumers import TraceConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/trace/", TraceConsumer.as_asgi(), name="ws-trace"),
]


def websocket_application() -> Any:
    return websocket_stack(URLRouter(websocket_urlpatterns))
