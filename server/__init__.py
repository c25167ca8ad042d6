"""The broker process's entry points: ``manage.py runbroker``, the ASGI application it serves,
the root URLs and ``/healthz``.

It wires the front ends (``api``, ``webui``, the Kafka listener) to the broker runtime
(``cairn.runtime``) and is the top of the layers: nothing imports it, so the front ends can
reach the runtime without an import cycle.
"""
