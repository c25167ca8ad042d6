"""Prometheus metrics: ``GET /metrics`` (README "Prometheus metrics").

* :mod:`cairn.metrics.registry`: the registry the endpoint exposes (and the process figures).
* :mod:`cairn.metrics.broker`: the broker's live state, read at scrape time.
* :mod:`cairn.metrics.requests`: REST and Kafka request counts and latencies, connections.
* :mod:`cairn.metrics.view`: the endpoint and who may scrape it (``CAIRN_METRICS_ALLOW``).

``deploy/grafana/cairn.json`` is a dashboard over these metrics.
"""
