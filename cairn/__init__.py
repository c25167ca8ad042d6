"""The Django project's settings and the broker runtime every front end reaches.

``cairn.settings`` (read from the environment, ``cairn.env``), ``cairn.runtime`` (what one
broker process owns while it runs: store, broker, services, the accounts' access backend),
and what serving needs (TLS, static files, the ASGI handler, memory policies). The process's
entry points that wire the front ends to it (``runbroker``, the ASGI application, the URLs)
are the ``server`` package, above the front ends.
"""
