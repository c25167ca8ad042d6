"""Store health: what an operator must know about a store beyond "it is running".

Two kinds of entries:

* **Problems** happened and stay reported until an operator acknowledges them: a CommitLog
  range quarantined by recovery, a config file recovered from an older copy, a derived file
  rebuilt, a segment deleted by forced cleanup. They are kept in ``<root>/health.json`` so
  that a restart cannot hide them; acknowledging one records who did it and when, and keeps
  it (for the history) but no longer counts it.
* **Conditions** hold now and clear by themselves: the disk is full and puts are refused,
  derived files are being rebuilt (with a progress fraction). They live in memory only.

The store is ``degraded`` while any problem is unacknowledged or any condition holds, and
``ok`` otherwise. ``/healthz``, ``GET /api/v1/status`` and the console overview show
:meth:`StoreHealth.as_dict`.

Several processes may report into one store (the broker, Celery workers, offline tools):
every change of ``health.json`` is a read-modify-write under an exclusive ``flock`` of
``<root>/health.lock``, written atomically (temp file, fsync, rename, directory fsync), and
readers reload the file when its modification time changed. A damaged ``health.json`` is set
aside as ``health.json.corrupt`` and counts as a problem of its own, never as "all clear".

Thread-safety: every public method is thread-safe.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from mqcore.clock import Clock, SystemClock

log = logging.getLogger(__name__)

FILE_NAME = "health.json"
LOCK_NAME = "health.lock"
#: Acknowledged problems kept for the history (oldest go first).
MAX_ACKNOWLEDGED = 200

Status = Literal["ok", "degraded"]


@dataclass
class Problem:
    """Something that went wrong and stays reported until acknowledged.

    ``id`` is stable for the same fact (reporting it again changes nothing), for example
    ``quarantine:00000000000004194304``. ``kind`` groups problems (``quarantine``,
    ``config_recovered``, ``derived_rebuilt``, ``forced_cleanup`` ...). ``summary`` is one
    line for an operator; ``detail`` holds the facts (file, position, length, reason ...).
    """

    id: str
    kind: str
    summary: str
    detail: dict[str, Any] = field(default_factory=dict)
    first_seen_ms: int = 0
    acknowledged_ms: int | None = None
    acknowledged_by: str | None = None

    @property
    def acknowledged(self) -> bool:
        return self.acknowledged_ms is not None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"acknowledged": self.acknowledged}


@dataclass
class Condition:
    """Something that holds now and clears by itself (``progress``: 0..1 when it has one)."""

    id: str
    kind: str
    summary: str
    detail: dict[str, Any] = field(default_factory=dict)
    since_ms: int = 0
    progress: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class StoreHealth:
    """Problems and conditions of the store at ``root`` (module docstring).

    Args:
        root: the store directory; None keeps everything in memory (tests, read-only tools
            that must not write).
        clock: time source for the timestamps.
        readonly: never write ``health.json`` (tools reading a live store); reports then
            stay in memory.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None,
        clock: Clock | None = None,
        *,
        readonly: bool = False,
    ) -> None:
        self.root = None if root is None else Path(root)
        self.clock: Clock = clock or SystemClock()
        self.readonly = readonly or root is None
        self._lock = threading.RLock()
        self._problems: dict[str, Problem] = {}
        self._conditions: dict[str, Condition] = {}
        self._loaded_mtime_ns: int | None = None

    # -- file -----------------------------------------------------------------------------

    @property
    def path(self) -> Path | None:
        return None if self.root is None else self.root / FILE_NAME

    @contextmanager
    def _file_locked(self) -> Iterator[None]:
        if self.root is None or self.readonly:
            yield
            return
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def _reload_if_changed(self) -> None:
        path = self.path
        if path is None:
            return
        try:
            mtime = path.stat().st_mtime_ns
        except FileNotFoundError:
            return
        if mtime == self._loaded_mtime_ns:
            return
        try:
            raw = json.loads(path.read_text("utf-8"))
            problems = {p["id"]: Problem(**p) for p in _problem_dicts(raw)}
        except (OSError, ValueError, TypeError, KeyError) as exc:
            self._set_aside_damaged(path, exc)
            return
        # Problems reported in memory only (readonly) survive a reload.
        for pid, problem in self._problems.items():
            problems.setdefault(pid, problem)
        self._problems = problems
        self._loaded_mtime_ns = mtime

    def _set_aside_damaged(self, path: Path, exc: Exception) -> None:
        if self.readonly:
            log.error("%s is unreadable (%s)", path, exc)
            return
        aside = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, aside)
        except OSError:
            pass
        log.error("%s was unreadable (%s); moved it to %s", path, exc, aside.name)
        self._problems.setdefault(
            "health-file",
            Problem(
                id="health-file",
                kind="health_file_damaged",
                summary=f"{FILE_NAME} was damaged and set aside as {aside.name}: "
                "problems reported before may be missing from this list",
                detail={"file": str(aside), "error": str(exc)},
                first_seen_ms=self.clock.now_ms(),
            ),
        )
        self._loaded_mtime_ns = None

    def _save(self) -> None:
        path = self.path
        if path is None or self.readonly:
            return
        acknowledged = sorted(
            (p for p in self._problems.values() if p.acknowledged),
            key=lambda p: p.acknowledged_ms or 0,
        )
        for old in acknowledged[: max(0, len(acknowledged) - MAX_ACKNOWLEDGED)]:
            del self._problems[old.id]
        text = json.dumps(
            {"version": 1, "problems": [asdict(p) for p in self._problems.values()]},
            indent=1,
            sort_keys=True,
        )
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        self._loaded_mtime_ns = path.stat().st_mtime_ns

    def load(self) -> StoreHealth:
        """Read ``health.json`` (if any). Returns self."""
        with self._lock, self._file_locked():
            self._reload_if_changed()
        return self

    # -- problems ---------------------------------------------------------------------------

    def report(
        self, kind: str, problem_id: str, summary: str, detail: dict[str, Any] | None = None
    ) -> Problem:
        """Report a problem (kept until acknowledged). Reporting the same ``problem_id`` again
        returns the existing entry unchanged, acknowledged or not; the caller logs it."""
        with self._lock, self._file_locked():
            self._reload_if_changed()
            existing = self._problems.get(problem_id)
            if existing is not None:
                return existing
            problem = Problem(
                id=problem_id,
                kind=kind,
                summary=summary,
                detail=dict(detail or {}),
                first_seen_ms=self.clock.now_ms(),
            )
            self._problems[problem_id] = problem
            self._save()
            return problem

    def acknowledge(self, ids: Collection[str] | None, by: str) -> list[Problem]:
        """Mark problems acknowledged by ``by`` (all open ones when ``ids`` is None).

        Returns:
            The problems this call acknowledged (unknown or already acknowledged ids are
            left out).
        """
        with self._lock, self._file_locked():
            self._reload_if_changed()
            now = self.clock.now_ms()
            done: list[Problem] = []
            for problem in self._problems.values():
                if problem.acknowledged or (ids is not None and problem.id not in ids):
                    continue
                problem.acknowledged_ms = now
                problem.acknowledged_by = by
                done.append(problem)
            if done:
                self._save()
            return done

    def problems(self, *, include_acknowledged: bool = False) -> list[Problem]:
        """Problems, oldest first; those seen in the same millisecond in the order reported."""
        with self._lock:
            self._reload_if_changed()
            items = [
                p for p in self._problems.values() if include_acknowledged or not p.acknowledged
            ]
        return sorted(items, key=lambda p: p.first_seen_ms)  # stable: ties keep report order

    # -- conditions ---------------------------------------------------------------------------

    def set_condition(
        self,
        kind: str,
        condition_id: str,
        summary: str,
        detail: dict[str, Any] | None = None,
        progress: float | None = None,
    ) -> Condition:
        """Start or update a condition (``since_ms`` stays that of its start)."""
        with self._lock:
            old = self._conditions.get(condition_id)
            condition = Condition(
                id=condition_id,
                kind=kind,
                summary=summary,
                detail=dict(detail or {}),
                since_ms=old.since_ms if old is not None else self.clock.now_ms(),
                progress=progress,
            )
            self._conditions[condition_id] = condition
            return condition

    def clear_condition(self, condition_id: str) -> bool:
        """End a condition. Returns whether it was set."""
        with self._lock:
            return self._conditions.pop(condition_id, None) is not None

    def conditions(self) -> list[Condition]:
        with self._lock:
            return sorted(self._conditions.values(), key=lambda c: (c.since_ms, c.id))

    # -- summary ------------------------------------------------------------------------------

    @property
    def status(self) -> Status:
        return "degraded" if self.problems() or self.conditions() else "ok"

    def as_dict(self, *, include_acknowledged: bool = False) -> dict[str, Any]:
        """``{"status", "problems", "conditions"}`` (and ``"acknowledged"`` when asked)."""
        problems = self.problems()
        conditions = self.conditions()
        out: dict[str, Any] = {
            "status": "degraded" if problems or conditions else "ok",
            "problems": [p.as_dict() for p in problems],
            "conditions": [c.as_dict() for c in conditions],
        }
        if include_acknowledged:
            out["acknowledged"] = [
                p.as_dict() for p in self.problems(include_acknowledged=True) if p.acknowledged
            ]
        return out


def _problem_dicts(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, dict) or not isinstance(raw.get("problems"), list):
        raise ValueError("not a health document (no 'problems' list)")
    items: list[dict[str, Any]] = raw["problems"]
    return items


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
