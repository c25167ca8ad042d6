"""WebSocket routes (Channels). The live trace joins at ``/ws/trace/``."""

from django.urls import URLPattern

websocket_urlpatterns: list[URLPattern] = []
