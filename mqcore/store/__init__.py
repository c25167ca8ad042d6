"""The RocketMQ-compatible store: ``from mqcore.store import MessageStore, StoreConfig``."""

from mqcore.store.config import StoreConfig
from mqcore.store.results import GetResult, GetStatus, PutResult, PutStatus
from mqcore.store.store import MessageStore

__all__ = ["GetResult", "GetStatus", "MessageStore", "PutResult", "PutStatus", "StoreConfig"]
