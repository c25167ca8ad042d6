"""Prometheus metrics: ``GET /metrics`` (README "Prometheus metrics").

* :mod:`server.metrics.registry`: the registry the endpoint exposes (and the process figures).
* :mod:`server.metrics.broker`: the broker's live state, read at scrape time.
* :mod:`server.metrics.requests`: REST and Kafka request counts and latencies, connections.
* :mod:`server.metrics.view`: the endpoint and who may scrape it (``CAIRN_METRICS_ALLOW``).

``deploy/grafana/cairn.json`` is a dashboard over these metrics.
"""
