"""What cleanup deleted, for the log, the health and the audit log.

Every CommitLog segment cleanup deletes is a :class:`Deletion`: the file, the CommitLog range
it held, why (``expired``: older than the retention; ``forced``: younger, deleted under disk
pressure because the operator allowed it) and the facts behind the decision. The cleanup
step logs each at WARNING, reports each forced one as a health problem, and hands each to
its :data:`DeletionHook`, which the runtime wires to the audit log (``accounts/audit.py``: mqcore
cannot import Django, so the hook is a plain callable).

A Celery worker has no Django either: its hook is :func:`journal_hook`, which appends the
deletion as one JSON line to ``<root>/cleanup/deletions.jsonl`` (flushed and fsynced before
the next file is deleted); the broker process moves the lines into its audit log with
:func:`drain_journal` every few seconds. Draining renames the journal to
``deletions.jsonl.draining`` first, records every line, then deletes it: a crash in between
records those lines again at the next drain (at least once, never lost). A journal line
that cannot be written (the disk is full) is logged with the deletion's facts instead.

Thread-safety: :func:`journal_hook` appends under a lock; one drainer per store.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

JOURNAL_DIR = "cleanup"
JOURNAL_NAME = "deletions.jsonl"
_DRAINING_SUFFIX = ".draining"


@dataclass(frozen=True, slots=True)
class Deletion:
    """One CommitLog segment deleted by cleanup.

    ``first_offset``..``end_offset`` is the CommitLog range it held (end exclusive);
    ``reason`` is ``expired`` or ``forced``; ``detail`` holds the facts (age, retention,
    disk usage, what consumers still needed).
    """

    file: str
    first_offset: int
    end_offset: int
    reason: str
    deleted_ms: int
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def forced(self) -> bool:
        return self.reason == "forced"

    def describe(self) -> str:
        return (
            f"deleted CommitLog segment {self.file} (offsets {self.first_offset}.."
            f"{self.end_offset}): {self.reason}"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Called once per segment deleted, after the deletion (must not raise; the runtime's logs
#: a failure of its own).
DeletionHook = Callable[[Deletion], None]


def journal_path(root: str | os.PathLike[str]) -> Path:
    return Path(root) / JOURNAL_DIR / JOURNAL_NAME


def journal_hook(root: str | os.PathLike[str]) -> DeletionHook:
    """A hook appending each deletion to ``<root>/cleanup/deletions.jsonl`` (module
    docstring), for a process that cannot write the audit log itself."""
    path = journal_path(root)
    lock = threading.Lock()

    def append(deletion: Deletion) -> None:
        line = json.dumps(deletion.as_dict(), sort_keys=True) + "\n"
        try:
            with lock:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "a", encoding="utf-8") as f:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as exc:
            log.error("%s not journaled for the audit log (%s): %s", path, exc, line.strip())

    return append


def drain_journal(root: str | os.PathLike[str], record: DeletionHook) -> int:
    """Hand every journaled deletion to ``record`` (the audit log), then forget them.

    Returns:
        How many were recorded.

    Raises:
        Whatever ``record`` raises: the lines stay in the ``.draining`` file for the next
        call.
    """
    path = journal_path(root)
    draining = path.with_name(path.name + _DRAINING_SUFFIX)
    if not draining.exists():
        try:
            os.replace(path, draining)
        except FileNotFoundError:
            return 0
    count = 0
    for line in draining.read_text("utf-8").splitlines():
        if not line.strip():
            continue
        try:
            deletion = Deletion(**json.loads(line))
        except (ValueError, TypeError) as exc:
            log.error("%s: unreadable line skipped (%s): %r", draining, exc, line)
            continue
        record(deletion)
        count += 1
    draining.unlink()
    return count
