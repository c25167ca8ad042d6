"""WebSocket routes (Channels). The live trace joins at ``/ws/trace/``.

:func:`websocket_application` is what ``server.asgi`` serves for the ``websocket`` protocol:
the routes wrapped in the origin check (:mod:`webui.origin`) and the session/token
authentication of :mod:`webui.auth`.
"""

from typing import Any

from channels.routing import URLRouter
from django.urls import URLPattern, path

from webui.auth import websocket_stack
from webui.consumers import TraceConsumer

#: Largest WebSocket message (and frame) the server reads; on a bigger one the server drops the
#: connection before the application sees it (autobahn under daphne fails it without a close
#: frame: a browser reports 1006). ``runbroker`` gives it to daphne. Subscribe frames
#: are refused above a much smaller size with an error frame (``webui.trace.MAX_FRAME_CHARS``).
MAX_MESSAGE_BYTES = 256 * 1024

websocket_urlpatterns: list[URLPattern] = [
    path("ws/trace/", TraceConsumer.as_asgi(), name="ws-trace"),
]


def websocket_application() -> Any:
    return websocket_stack(URLRouter(websocket_urlpatterns))
