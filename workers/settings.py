"""Worker settings from the same ``CAIRN_*`` variables as the broker (see the README).

``CAIRN_STORE_DIR`` (or ``$CAIRN_DATA_DIR/store``, relative to the repository, as the broker
resolves it) names the store; ``CAIRN_REDIS_URL`` the Redis that carries tasks, results and
progress events. Service knobs are parsed by ``mqcore.services.config``, so the broker and
the workers read them the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

from mqcore.services.config import ServicesConfig, services_config_from_env
from mqcore.store.config import StoreConfig

REPO = Path(__file__).resolve().parent.parent


def _get(name: str, default: str) -> str:
    return os.environ.get(name, "").strip() or default


def redis_url() -> str:
    return _get("CAIRN_REDIS_URL", "redis://127.0.0.1:6379/0")


def store_dir(explicit: str | None = None) -> Path:
    """The store a task works on: the task's argument, else the environment's."""
    if explicit:
        return Path(explicit).resolve()
    raw = _get("CAIRN_STORE_DIR", "")
    if raw:
        return Path(raw).resolve()
    return data_dir() / "store"


def data_dir() -> Path:
    return (REPO / _get("CAIRN_DATA_DIR", "var")).resolve()


def pipeline_dir() -> Path:
    """The pipeline's output directory (``manage.py pipeline``'s default ``--out``)."""
    return data_dir() / "pipeline"


def archive_out_dir() -> Path:
    """The ``out_dir`` for ``run_archive`` so that the archive lands at ``CAIRN_ARCHIVE_DIR``
    (default ``$CAIRN_DATA_DIR/pipeline/archive``). run_archive writes ``<out>/archive``: a
    directory named ``archive`` is written in place, any other gets an ``archive/`` inside
    (key queries find either)."""
    raw = _get("CAIRN_ARCHIVE_DIR", "")
    archive = Path(raw).resolve() if raw else pipeline_dir() / "archive"
    return archive.parent if archive.name == "archive" else archive


def _interval_s(name: str, default: float) -> float:
    raw = _get(name, str(default))
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"{name}: expected seconds, got {raw!r}") from None
    if value < 0:
        raise SystemExit(f"{name}: must be 0 (off) or more, got {raw!r}")
    return value


def archive_interval_s() -> float:
    """Beat period of ``cairn.pipeline_archive`` (0: not scheduled)."""
    return _interval_s("CAIRN_ARCHIVE_INTERVAL_S", 3600.0)


def stats_interval_s() -> float:
    """Beat period of ``cairn.pipeline_stats`` (0: not scheduled)."""
    return _interval_s("CAIRN_STATS_INTERVAL_S", 300.0)


def compact_interval_s() -> float:
    """Beat period of the archive compaction task (0 turns it off)."""
    return _interval_s("CAIRN_COMPACT_INTERVAL_S", 86400.0)


def services() -> ServicesConfig:
    return services_config_from_env(os.environ)


def store_config(root: Path) -> StoreConfig:
    from mqcore.services.config import worker_store_config

    return worker_store_config(root, os.environ)


def beat_schedule_file() -> str:
    """Celery beat's state file: kept beside the store's service files, not in the CWD."""
    configured = _get("CAIRN_BEAT_SCHEDULE_FILE", "")
    if configured:
        return configured
    directory = store_dir() / "services"
    directory.mkdir(parents=True, exist_ok=True)
    return str(directory / "celerybeat-schedule")
