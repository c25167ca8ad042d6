"""What every config manager shares: one file, written atomically with an integrity record and
loaded from its newest intact copy (:mod:`mqcore.metadata.checked_file`).

A manager keeps its state in memory and describes it with three pure steps, which this base
class strings together for :meth:`load`, :meth:`persist`, :meth:`to_document` and
:meth:`replace_from_document`:

* ``_snapshot_locked()`` copies the state (called with the state lock held);
* ``_encode(state)`` turns a snapshot into fastjson text;
* ``_decode(raw, strict)`` turns parsed JSON into a state: ``strict=False`` checks the shape only
  (loading a file), ``strict=True`` also enforces the rules (importing a document).

Locks: ``_write_lock`` serialises writes of the file and is always taken *before* ``_lock``,
which guards the in-memory state. A change that must reach disk before it counts (topics,
groups) holds both (:meth:`_changing`), writes the new state, and only then installs it, so a
failed write leaves memory and disk as they were. High-rate state (offsets) changes under
``_lock`` alone and is written by :meth:`persist` on a timer.
"""

from __future__ import annotations

import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from mqcore.clock import Clock
from mqcore.metadata.checked_file import CheckedFile, LoadOutcome
from mqcore.metadata.jsonfile import StrPath, parse_document

log = logging.getLogger(__name__)


class ConfigFileManager[S](ABC):
    """Base of the managers of ``{root}/config/*.json``. Public methods are thread-safe."""

    FILE_NAME: ClassVar[str]

    def __init__(self, config_dir: StrPath, clock: Clock) -> None:
        self._path = os.path.join(os.fspath(config_dir), self.FILE_NAME)
        self._file = CheckedFile(self._path)
        self._clock = clock
        self._write_lock = threading.Lock()
        self._lock = threading.RLock()

    @property
    def path(self) -> str:
        """The file this manager reads and writes."""
        return self._path

    # -- the steps a manager provides ------------------------------------------------------

    @abstractmethod
    def _snapshot_locked(self) -> S: ...

    @abstractmethod
    def _encode(self, state: S) -> str: ...

    @abstractmethod
    def _decode(self, raw: Any, strict: bool) -> S: ...

    @abstractmethod
    def _empty_state(self) -> S: ...

    @abstractmethod
    def _install_locked(self, state: S) -> None: ...

    def names_in(self, state: S) -> frozenset[str]:
        """The names a state holds (topics, groups), to compare a damaged copy with the one
        loaded; empty for files that are not tables of names."""
        return frozenset()

    def _restore_locked(self, state: S) -> None:
        """Install a state rebuilt by recovery, writing it first; the caller holds both locks.

        Unlike a user's change, the state is installed even when the write fails (a full
        disk at start): data the store holds must be reachable, and the next write persists
        it. The write error is raised after installing.
        """
        try:
            self._write_locked(state)
        finally:
            self._install_locked(state)

    def _prepare_import_locked(self, state: S) -> S:
        """Adjust an imported state before it replaces the current one (e.g. bump the version)."""
        return state

    # -- shared behaviour --------------------------------------------------------------------

    @contextmanager
    def _changing(self) -> Iterator[None]:
        with self._write_lock, self._lock:
            yield

    def _write_locked(self, state: S) -> None:
        """Write ``state`` to the file; the caller holds ``_write_lock``."""
        self._file.write(self._encode(state))

    def load(self) -> LoadOutcome[S]:
        """Replace the in-memory state with the file's newest intact copy.

        A recovery (``X`` damaged or missing, the record damaged, no intact copy) is logged at
        ERROR with what was damaged and what was loaded; the damaged files are set aside. The
        caller (:meth:`mqcore.metadata.Metadata.load`) reconciles, persists and reports it.

        Returns:
            What was found and loaded (``value`` None: empty state).

        Raises:
            OSError: a file exists but cannot be read or set aside.
        """
        with self._write_lock:
            outcome = self._file.load(lambda raw: self._decode(raw, False))
            with self._lock:
                state = outcome.value
                self._install_locked(self._empty_state() if state is None else state)
        if outcome.recovered:
            log.error("%s", outcome.describe())
        elif outcome.damage:
            log.warning(
                "%s: loaded intact; but %s",
                outcome.file_name,
                "; ".join(f"{label} {state}" for label, state in outcome.damage),
            )
        return outcome

    def persist(self) -> None:
        """Write the current state to the file (atomically, keeping the previous one as .bak
        and recording both in the integrity record).

        Raises:
            OSError: the write failed; the file is unchanged.
        """
        with self._write_lock:
            with self._lock:
                state = self._snapshot_locked()
            self._write_locked(state)

    def to_document(self) -> str:
        """The state as RocketMQ would write this file (for export)."""
        with self._lock:
            state = self._snapshot_locked()
        return self._encode(state)

    def preview_document(self, text: str) -> str:
        """``text`` as this file would hold it after :meth:`replace_from_document` (legacy
        shapes and strict JSON turned into the broker's own format), without changing
        anything: what an import's diff compares with :meth:`to_document`.

        Raises:
            ValidationError: as :meth:`replace_from_document`.
        """
        return self._encode(self._decode(parse_document(text), True))

    def replace_from_document(self, text: str) -> None:
        """Replace the whole state with a document in this file's format (for import).

        The document is parsed and checked in full first; if anything in it is wrong, nothing
        changes. Otherwise the new state is written to disk and then installed.

        Raises:
            ValidationError: the document does not parse or breaks a rule; ``field`` says where.
            OSError: the write failed; nothing changed.
        """
        state = self._decode(parse_document(text), True)
        with self._changing():
            state = self._prepare_import_locked(state)
            self._write_locked(state)
            self._install_locked(state)
