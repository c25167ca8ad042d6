"""The RocketMQ-compatible store: ``from mqcore.store import MessageStore, StoreConfig``.

The names are loaded on first use (PEP 562) so that low-level modules (``mqcore.message``,
``mqcore.validation``) can import ``mqcore.store.<module>`` without importing the facade.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mqcore.store.config import StoreConfig
    from mqcore.store.results import GetResult, GetStatus, PutResult, PutStatus
    from mqcore.store.store import MessageStore

_EXPORTS = {
    "StoreConfig": "mqcore.store.config",
    "GetResult": "mqcore.store.results",
    "GetStatus": "mqcore.store.results",
    "PutResult": "mqcore.store.results",
    "PutStatus": "mqcore.store.results",
    "MessageStore": "mqcore.store.store",
}

__all__ = ["GetResult", "GetStatus", "MessageStore", "PutResult", "PutStatus", "StoreConfig"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mqcore.store' has no attribute {name!r}")
    return getattr(import_module(module), name)
