"""The ASGI application: HTTP (Django, static files) and WebSocket (Channels) in one."""

import gc
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cairn.settings")

import django  # noqa: E402

# Django must be set up before anything imports models (Channels' auth does).
django.setup(set_prefix=False)

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from cairn.handler import OneHopASGIHandler  # noqa: E402
from webui.metrics import sampler  # noqa: E402
from webui.routing import websocket_application  # noqa: E402

# HTTP: Django with the middleware chain and the view in one thread hop (cairn.handler).
django_http = OneHopASGIHandler()

# WebSocket: origin check, session or ?token= authentication, then the routes (webui.auth).
application = ProtocolTypeRouter(
    {
        "http": ASGIStaticFilesHandler(django_http),
        "websocket": websocket_application(),
    }
)

# The console's throughput chart samples the broker's counters from now on (webui.metrics).
sampler.start()

# Everything loaded so far (Django, the URL and view modules, a running broker's state) lives
# as long as the process. Moved out of the collector's generations, it is no longer walked by
# each full collection, which the allocations of a 1000-message send trigger: that cost a
# batch ~1.7 ms of garbage collection in parsing and validation alone, ~0.4 ms once frozen.
gc.collect()
gc.freeze()
