"""The Django project: settings, URLs, the ASGI application and the ``runbroker`` command.

It wires the front ends (api, webui, the Kafka listener) to one broker runtime.
"""
