"""``<root>/rebuild``: where derived files are rebuilt, and the journaled swap that installs them.

ConsumeQueues and IndexFiles are rebuilt from the CommitLog *beside* the live files, never in
place, then swapped in by directory renames. A rename is atomic, but a swap is several (the
live directory out, the rebuilt one in, for each directory), so a small journal makes the
whole swap all-or-nothing: once the journal is written the swap is completed (rolled
forward) by whoever finds it (the next store open, the next ``rebuildindex``); before that
the live files were never touched. Killed at any moment, a rebuild leaves the old files or
the new ones, never a mix that a broker would serve.

Layout::

    <root>/rebuild/
        swap.json                  journal of a swap in progress (SWAP_JOURNAL)
        job.json                   the index side build (``mqcore.services.index_build``)
        index.request              the start check found the index damaged: the rebuild
                                   service starts a side build of it (``{"reason"}``)
        queues.json                the ConsumeQueue rebuild (``mqcore.services.queue_build``)
        index/                     side IndexFiles
        consumequeue/<topic>/<q>/  side ConsumeQueues
        old/<n>/                   live directories moved out by a swap, removed after it
        trash/<...>/               live files set aside at start (unloadable), removed by the
                                   rebuild that replaces them

The swap (:func:`swap_in`), in order:

1. The caller has made the side directories complete and durable (files msynced).
2. ``swap.json`` is written atomically: a list of moves ``{side, live, keep}`` (paths relative
   to the root; ``keep`` names files of ``live`` that the new directory keeps, such as index
   files wholly below a partial rebuild's range).
3. Each move is rolled forward: kept files go from ``live`` into ``side``; ``live`` (if any)
   is renamed to ``old/<n>``; ``side`` is renamed to ``live``; the parents are fsynced.
   Every step checks what exists first, so running it again after a crash at any point
   ends in the same place.
4. ``old/`` is removed, then ``swap.json``.

Thread-safety: none; the callers hold the reput lock (online) or have the store to
themselves (offline, start-up).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mqcore.store.files.mapped_file import fsync_directory

log = logging.getLogger(__name__)

DIRECTORY = "rebuild"
SWAP_JOURNAL = "swap.json"
INDEX_JOB = "job.json"
INDEX_REQUEST = "index.request"
QUEUES_JOB = "queues.json"
SIDE_INDEX = "index"
SIDE_QUEUES = "consumequeue"
OLD = "old"
TRASH = "trash"


@dataclass(frozen=True)
class Move:
    """One directory of a swap: ``side`` replaces ``live`` (both relative to the root)."""

    side: str
    live: str
    keep: list[str] = field(default_factory=list)


def rebuild_dir(root: str | os.PathLike[str]) -> Path:
    return Path(root) / DIRECTORY


def write_json_atomically(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path``: temp file, fsync, rename, fsync the directory.

    Raises:
        OSError: the write failed; the previous file is left intact.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


def read_json(path: Path) -> Any | None:
    """The JSON document at ``path``; None if it is missing or unreadable (logged)."""
    try:
        return json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.error("%s is unreadable (%s); ignoring it", path, exc)
        return None


def sync_tree(directory: Path) -> None:
    """fsync every file and directory under ``directory`` (a side build before its swap)."""
    if not directory.exists():
        return
    for current, _dirs, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(current, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(current)


def swap_in(root: str | os.PathLike[str], moves: Sequence[Move]) -> None:
    """Install side directories over live ones, all or nothing (module docstring).

    Raises:
        OSError: a rename failed; the journal stays and the next :func:`finish_swap`
            completes it.
    """
    root = Path(root)
    journal = rebuild_dir(root) / SWAP_JOURNAL
    write_json_atomically(journal, {"moves": [asdict(m) for m in moves]})
    _roll_forward(root, list(moves))


def finish_swap(root: str | os.PathLike[str]) -> bool:
    """Complete a swap a crash interrupted (a journal is present). Returns whether there
    was one. Call before the derived files are loaded.

    Raises:
        OSError: a rename failed (the journal stays for the next attempt).
    """
    root = Path(root)
    raw = read_json(rebuild_dir(root) / SWAP_JOURNAL)
    if raw is None:
        return False
    try:
        moves = [Move(**m) for m in raw["moves"]]
    except (KeyError, TypeError) as exc:
        log.error("%s: unreadable swap journal (%s); left as it is", root, exc)
        return False
    log.warning("%s: completing an interrupted swap of rebuilt files: %s", root, moves)
    _roll_forward(root, moves)
    return True


def _roll_forward(root: Path, moves: list[Move]) -> None:
    old_root = rebuild_dir(root) / OLD
    for n, move in enumerate(moves):
        side, live, old = root / move.side, root / move.live, old_root / str(n)
        if side.exists():
            for name in move.keep:
                if (live / name).exists() and not (side / name).exists():
                    os.replace(live / name, side / name)
            if live.exists():
                shutil.rmtree(old, ignore_errors=True)
                old.parent.mkdir(parents=True, exist_ok=True)
                os.replace(live, old)
            live.parent.mkdir(parents=True, exist_ok=True)
            os.replace(side, live)
            fsync_directory(live.parent)
            _prune_empty_parents(side, rebuild_dir(root))
        elif not live.exists() and old.exists():
            os.replace(old, live)  # never seen in practice: put the old files back
            fsync_directory(live.parent)
    shutil.rmtree(old_root, ignore_errors=True)
    journal = rebuild_dir(root) / SWAP_JOURNAL
    journal.unlink(missing_ok=True)
    if journal.parent.exists():
        fsync_directory(journal.parent)


def _prune_empty_parents(path: Path, stop: Path) -> None:
    """Remove the empty directories above ``path``, up to (not including) ``stop``."""
    for parent in path.parents:
        if parent == stop or stop not in parent.parents:
            return
        try:
            parent.rmdir()
        except OSError:
            return


def set_aside(root: str | os.PathLike[str], directory: Path) -> Path:
    """Move a live directory that cannot be loaded into ``rebuild/trash`` (same relative
    path), so that a fresh one can be written while its rebuild runs. Returns where it went.

    Raises:
        OSError: the rename failed.
    """
    root = Path(root)
    target = rebuild_dir(root) / TRASH / directory.relative_to(root)
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(directory, target)
    fsync_directory(directory.parent)
    return target


def empty_trash(root: str | os.PathLike[str]) -> None:
    shutil.rmtree(rebuild_dir(root) / TRASH, ignore_errors=True)


def load_queue_job(root: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ConsumeQueue rebuild job (``queues.json``): ``{"state", "queues": [{"topic",
    "queue_id", "reason"}], ...}`` (``mqcore.services.queue_build`` adds its progress), or
    None."""
    raw = read_json(rebuild_dir(root) / QUEUES_JOB)
    return raw if isinstance(raw, dict) else None


def save_queue_job(root: str | os.PathLike[str], job: dict[str, Any]) -> None:
    """Write ``queues.json`` atomically.

    Raises:
        OSError: the write failed.
    """
    write_json_atomically(rebuild_dir(root) / QUEUES_JOB, job)


def unfinished(root: str | os.PathLike[str]) -> list[str]:
    """What an interrupted or running rebuild left in ``<root>/rebuild``, one line each
    (empty when nothing): the offline check calls a store with any of it half built."""
    directory = rebuild_dir(root)
    found: list[str] = []
    if (directory / SWAP_JOURNAL).exists():
        found.append(f"{DIRECTORY}/{SWAP_JOURNAL}: a swap of rebuilt files was interrupted")
    queues = read_json(directory / QUEUES_JOB)
    if isinstance(queues, dict) and queues.get("state") not in (None, "installed"):
        names = [f"{q.get('topic')}/{q.get('queue_id')}" for q in queues.get("queues", [])]
        found.append(
            f"{DIRECTORY}/{QUEUES_JOB}: ConsumeQueue rebuild {queues.get('state')} "
            f"({', '.join(names) or 'all queues'})"
        )
    if (directory / INDEX_REQUEST).exists():
        found.append(f"{DIRECTORY}/{INDEX_REQUEST}: index rebuild requested, not started")
    job = read_json(directory / INDEX_JOB)
    if isinstance(job, dict) and job.get("state") in ("building", "ready"):
        found.append(f"{DIRECTORY}/{INDEX_JOB}: index rebuild {job.get('state')}")
    for side in (SIDE_QUEUES, SIDE_INDEX):
        has_files = any(p.is_file() for p in (directory / side).rglob("*"))
        if has_files and not found:
            found.append(f"{DIRECTORY}/{side}: side files of an unfinished rebuild")
    return found
