"""A request's client as the born host of the records it sends (REST and the console alike;
the Kafka listener takes it from its socket, ``kafka_listener.mapping.born_host``)."""

from __future__ import annotations

import functools
import ipaddress
from typing import Any

from mqcore.format.msgid import HostAddress


def born_host(request: Any) -> HostAddress | None:
    """The client's address and port (the ASGI scope's ``client``) as the records' born
    host; port 0 when the server gives none (a test client); None if it is not an IP.
    ``request`` is a Django or a DRF request (both have ``META``)."""
    meta = request.META
    return _host(meta.get("REMOTE_ADDR", ""), meta.get("REMOTE_PORT", 0))


@functools.lru_cache(maxsize=1024)
def _host(address: str, port: object) -> HostAddress | None:
    try:
        ip = ipaddress.ip_address(address)
        number = int(port)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
    return HostAddress(str(ip), number if 0 <= number <= 0xFFFF else 0)
