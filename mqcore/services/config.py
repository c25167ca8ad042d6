"""Service settings from ``CAIRN_*`` environment variables, read the same way by the broker
and by the Celery workers.

The functions take the environment as a mapping (``os.environ`` in production, a dict in
tests) and return frozen dataclasses; nothing here reads the process environment itself.

A worker opens the store with the geometry the broker published in
``<root>/services/store.json`` (:func:`worker_store_config`): segment sizes that differ from
the broker's cannot even load the files, so they are never taken from the worker's own
environment when the broker's are known.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mqcore.errors import ValidationError
from mqcore.store.config import StoreConfig
from mqcore.store.sharing.progress import published_config

Mode = Literal["inline", "celery"]


def parse_bool(raw: str) -> bool:
    """``true``/``false`` (also ``1``/``0``, ``yes``/``no``, ``on``/``off``), any case.

    Raises:
        ValueError: anything else.
    """
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


#: variable -> (StoreConfig field, parser). Defaults are StoreConfig's (spec 6, Appendix A).
STORE_VARIABLES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "CAIRN_FLUSH": ("flush", str.lower),
    "CAIRN_FLUSH_INTERVAL_MS": ("flush_interval_commitlog_ms", int),
    "CAIRN_FLUSH_LEAST_PAGES": ("flush_commitlog_least_pages", int),
    "CAIRN_FLUSH_THOROUGH_INTERVAL_MS": ("flush_commitlog_thorough_interval_ms", int),
    "CAIRN_CQ_FLUSH_INTERVAL_MS": ("flush_interval_consume_queue_ms", int),
    "CAIRN_FILE_RESERVED_HOURS": ("file_reserved_time_hours", float),
    "CAIRN_DELETE_WHEN": ("delete_when", str),
    "CAIRN_DISK_MAX_USED_RATIO": ("disk_max_used_space_ratio", int),
    "CAIRN_DISK_WARNING_RATIO": ("disk_space_warning_level_ratio", int),
    "CAIRN_DISK_CLEAN_FORCIBLY_RATIO": ("disk_space_clean_forcibly_ratio", int),
    "CAIRN_DELETE_FILES_BATCH_MAX": ("delete_file_batch_max", int),
    "CAIRN_CLEAN_INTERVAL_MS": ("clean_resource_interval_ms", int),
    "CAIRN_DISK_CLEAN_FORCIBLY_UNCONSUMED": ("disk_clean_forcibly_unconsumed", parse_bool),
    "CAIRN_COMMITLOG_FILE_SIZE": ("commitlog_file_size", int),
    "CAIRN_CQ_FILE_ENTRIES": ("consume_queue_file_entries", int),
    "CAIRN_INDEX_HASH_SLOTS": ("index_hash_slots", int),
    "CAIRN_INDEX_MAX_ENTRIES": ("index_max_entries", int),
}


@dataclass(frozen=True)
class ServicesConfig:
    """How the services are run (the store's own knobs are in ``StoreConfig``).

    Attributes:
        mode: ``inline`` (threads in the broker) or ``celery`` (workers), CAIRN_SERVICES.
        reput_max_bytes: CommitLog bytes one reput pass dispatches at most.
        reput_poll_ms: a worker's reput loop checks for new CommitLog this often while idle
            (RocketMQ's reput thread sleeps 1 ms; CAIRN_REPUT_POLL_MS).
        reput_lease_s: a worker's reput task runs this long, then queues its successor, so a
            warm shutdown never waits long (CAIRN_REPUT_LEASE_S).
        reput_ensure_s: beat sends a reput task this often; it takes over within this long
            when the worker running reput died (CAIRN_REPUT_ENSURE_S).
        follow_interval_ms: the broker's follow loop polls the progress file this often
            when no Redis event woke it (celery mode).
        clean_first_delay_ms: the first cleanup runs this long after start (60 s in RocketMQ;
            CAIRN_CLEAN_FIRST_DELAY_MS).
        index_step_bytes: CommitLog bytes one index-build step re-indexes.
        index_spark_min_bytes: stores at least this big are handed to the Spark index builder
            when ``pipeline`` is installed (CAIRN_INDEX_SPARK_MIN_BYTES).
        status_interval_ms: how often a worker records a long-running service's status.
    """

    mode: Mode = "inline"
    reput_max_bytes: int = 4 * 1024 * 1024
    reput_poll_ms: int = 1
    reput_lease_s: float = 30.0
    reput_ensure_s: float = 5.0
    follow_interval_ms: int = 100
    clean_first_delay_ms: int = 60_000
    index_step_bytes: int = 16 * 1024 * 1024
    index_spark_min_bytes: int = 64 * 1024**3
    status_interval_ms: int = 1_000


SERVICE_VARIABLES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "CAIRN_SERVICES": ("mode", str.lower),
    "CAIRN_REPUT_POLL_MS": ("reput_poll_ms", int),
    "CAIRN_REPUT_LEASE_S": ("reput_lease_s", float),
    "CAIRN_REPUT_ENSURE_S": ("reput_ensure_s", float),
    "CAIRN_REPUT_MAX_BYTES": ("reput_max_bytes", int),
    "CAIRN_FOLLOW_INTERVAL_MS": ("follow_interval_ms", int),
    "CAIRN_CLEAN_FIRST_DELAY_MS": ("clean_first_delay_ms", int),
    "CAIRN_INDEX_SPARK_MIN_BYTES": ("index_spark_min_bytes", int),
}


def _parsed(
    env: Mapping[str, str], table: Mapping[str, tuple[str, Callable[[str], Any]]]
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name, (field, parse) in table.items():
        raw = env.get(name, "").strip()
        if not raw:
            continue
        try:
            values[field] = parse(raw)
        except ValueError:
            rule, kind = (
                ("boolean", "true or false") if parse is parse_bool else ("number", "a number")
            )
            raise ValidationError(name, rule, f"{name}: expected {kind}, got {raw!r}") from None
    return values


def services_config_from_env(env: Mapping[str, str]) -> ServicesConfig:
    """Raises: ValidationError for a malformed value."""
    values = _parsed(env, SERVICE_VARIABLES)
    if values.get("mode", "inline") not in ("inline", "celery"):
        raise ValidationError(
            "CAIRN_SERVICES", "choice", "CAIRN_SERVICES: expected inline or celery"
        )
    return ServicesConfig(**values)


def store_config_from_env(env: Mapping[str, str], base: StoreConfig | None = None) -> StoreConfig:
    """``base`` (default ``StoreConfig()``) with the CAIRN_* store variables applied.

    Raises:
        ValidationError: a malformed value, or one StoreConfig rejects.
    """
    return dataclasses.replace(base or StoreConfig(), **_parsed(env, STORE_VARIABLES))


def worker_store_config(root: str | os.PathLike[str], env: Mapping[str, str]) -> StoreConfig:
    """The config a service process opens ``root`` with: its environment's settings, then
    the broker's published geometry on top (the broker's wins: it wrote the files)."""
    config = store_config_from_env(env)
    shared = published_config(root)
    return dataclasses.replace(config, **shared) if shared else config
