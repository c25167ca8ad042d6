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

# A young-generation collection walks every container allocated since the last one that is
# still alive. At CPython's default threshold (700 net allocations) a 1000-message send
# (~8 containers a message: the parsed JSON, then each layer's message object) ran ~11 of
# them and a middle-generation one per request, each walking the send's live messages again:
# ~1 ms a batch. At 10,000 a batch triggers at most one. What a request leaves behind is
# mostly freed by reference counting (api.views.base breaks the view's reference cycles), so
# the rarer collections find little garbage and promote few survivors.
GC_YOUNG_THRESHOLD = 10_000
gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
