"""Service status as Celery workers report it, for the broker's REST API and console.

In-process services keep their state on their :class:`~mqcore.services.runner.ServiceLoop`.
A worker's task records each run in ``<root>/services/status/<service>.json`` (replaced
atomically, never fsynced: it is a status page, not data), so the broker reads it through
the store directory like everything else it learns from the workers. Runs that were
``skipped`` are not recorded: they say nothing about the service.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from mqcore.services.result import StepResult
from mqcore.store.sharing.progress import services_dir


def status_dir(root: str | os.PathLike[str]) -> Path:
    return services_dir(root) / "status"


def _read(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


def record(
    root: str | os.PathLike[str],
    service: str,
    now_ms: int,
    *,
    result: StepResult | None = None,
    error: str = "",
    runs: int = 1,
) -> None:
    """Add ``runs`` runs (ending in ``result`` or ``error``) to ``service``'s status file."""
    if result is not None and result.status == "skipped":
        return
    directory = status_dir(root)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{service}.json"
    state = _read(path)
    state.update(
        name=service,
        runs=int(state.get("runs", 0)) + runs,
        last_run_ms=now_ms,
        runner=f"{os.getpid()} {socket.gethostname()}",
    )
    state.setdefault("errors", 0)
    state.setdefault("last_error", "")
    state.setdefault("last_error_ms", 0)
    if error:
        state["errors"] = int(state["errors"]) + 1
        state["last_error"] = error
        state["last_error_ms"] = now_ms
    if result is not None:
        state["last_result"] = result.as_dict()
    tmp = directory / f".{service}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(state, sort_keys=True))
    os.replace(tmp, path)


def read_all(root: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Every service's recorded status, by service name."""
    directory = status_dir(root)
    if not directory.is_dir():
        return {}
    return {p.stem: _read(p) for p in sorted(directory.glob("*.json"))}
