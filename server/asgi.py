"""The ASGI application: HTTP (Django, static files) and WebSocket (Channels) in one."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cairn.settings")

import django  # noqa: E402

# Django must be set up before anything imports models (Channels' auth does).
django.setup(set_prefix=False)

from channels.routing import ProtocolTypeRouter  # noqa: E402

from cairn.gc_policy import settle_long_lived  # noqa: E402
from cairn.handler import OneHopASGIHandler  # noqa: E402
from cairn.malloc_policy import keep_large_buffers  # noqa: E402
from cairn.static import StaticFiles  # noqa: E402
from server.metrics.requests import CountWebsockets  # noqa: E402
from webui.metrics import sampler  # noqa: E402
from webui.routing import websocket_application  # noqa: E402

# HTTP: Django with the middleware chain and the view in one thread hop (cairn.handler).
django_http = OneHopASGIHandler()

# Static files: only those the finders list at start, by name (cairn.static says why).
# WebSocket: origin check (webui.origin), session or ?token= authentication (webui.auth),
# then the routes (webui.routing); open connections counted for /metrics.
application = ProtocolTypeRouter(
    {
        "http": StaticFiles(django_http),
        "websocket": CountWebsockets(websocket_application()),
    }
)

# The console's throughput chart samples the broker's counters from now on (webui.metrics).
sampler.start()

# Long-lived objects frozen, fewer young collections (cairn.gc_policy says why).
settle_long_lived()
# Megabyte buffers from the heap, not fresh mappings (cairn.malloc_policy says why).
keep_large_buffers()
