"""The operators' console: server-rendered pages and the live-trace WebSocket consumer."""
