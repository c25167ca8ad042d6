"""The ASGI application: HTTP (Django, static files) and WebSocket (Channels) in one."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "cairn.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

# Django must be set up before anything imports models (Channels' auth does).
django_http = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from webui.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": ASGIStaticFilesHandler(django_http),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
