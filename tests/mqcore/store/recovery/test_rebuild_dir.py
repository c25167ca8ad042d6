"""The journaled swap of rebuilt files (rebuild_dir.py): a crash anywhere leaves the old files
or the new ones once the swap is finished, never a mix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mqcore.store.recovery import rebuild_dir
from mqcore.store.recovery.rebuild_dir import Move, finish_swap, swap_in, unfinished


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (but ``rebuild/``) and its content."""
    return {
        str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] != "rebuild"
    }


def make(root: Path) -> list[Move]:
    """Live ``consumequeue/T/0`` and ``index`` (with a file the swap keeps), and their side
    builds."""
    for rel, text in {
        "consumequeue/T/0/00000000000000000000": "old queue",
        "index/20240101000000000": "old index kept",
        "index/20240102000000000": "old index",
        "rebuild/consumequeue/T/0/00000000000000000000": "new queue",
        "rebuild/consumequeue/T/0/00000000000000001000": "new queue 2",
        "rebuild/index/20240103000000000": "new index",
    }.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return [
        Move("rebuild/consumequeue/T/0", "consumequeue/T/0"),
        Move("rebuild/index", "index", ["20240101000000000"]),
    ]


NEW = {
    "consumequeue/T/0/00000000000000000000": "new queue",
    "consumequeue/T/0/00000000000000001000": "new queue 2",
    "index/20240101000000000": "old index kept",
    "index/20240103000000000": "new index",
}


def test_swap_in(tmp_path: Path) -> None:
    swap_in(tmp_path, make(tmp_path))
    assert tree(tmp_path) == NEW
    assert not (tmp_path / "rebuild" / "swap.json").exists()
    assert not (tmp_path / "rebuild" / "old").exists()
    assert unfinished(tmp_path) == []


def test_swap_into_a_missing_directory(tmp_path: Path) -> None:
    moves = make(tmp_path)
    for f in (tmp_path / "consumequeue" / "T" / "0").iterdir():
        f.unlink()
    (tmp_path / "consumequeue" / "T" / "0").rmdir()
    (tmp_path / "consumequeue" / "T").rmdir()
    swap_in(tmp_path, moves)
    assert tree(tmp_path) == NEW


@pytest.mark.parametrize("crash_after", range(6))
def test_a_crash_at_any_rename_is_completed_by_finish_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_after: int
) -> None:
    """The process dies after ``crash_after`` renames (an OSError stands for the kill: nothing
    after it runs); the next open's finish_swap ends in the new files."""
    moves = make(tmp_path)
    real = os.replace
    done = [0]

    def dying_replace(src: object, dst: object) -> None:
        if done[0] == crash_after:
            raise OSError("killed")
        done[0] += 1
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(rebuild_dir.os, "replace", dying_replace)
    with pytest.raises(OSError, match="killed"):
        swap_in(tmp_path, moves)
    monkeypatch.setattr(rebuild_dir.os, "replace", real)
    if crash_after >= 1:  # the journal itself is the first rename
        assert unfinished(tmp_path)
        assert finish_swap(tmp_path)
        assert tree(tmp_path) == NEW
    else:  # killed before the journal: the live files are untouched
        assert not finish_swap(tmp_path)
        assert tree(tmp_path)["index/20240102000000000"] == "old index"
    assert not finish_swap(tmp_path)  # nothing left to do


def test_finish_swap_twice_changes_nothing(tmp_path: Path) -> None:
    swap_in(tmp_path, make(tmp_path))
    rebuild_dir.write_json_atomically(
        tmp_path / "rebuild" / "swap.json",
        {"moves": [{"side": "rebuild/index", "live": "index", "keep": []}]},
    )
    assert finish_swap(tmp_path)  # the side is gone: already done
    assert tree(tmp_path) == NEW


def test_set_aside_and_empty_trash(tmp_path: Path) -> None:
    queue = tmp_path / "consumequeue" / "T" / "3"
    queue.mkdir(parents=True)
    (queue / "00000000000000000000").write_text("x")
    moved = rebuild_dir.set_aside(tmp_path, queue)
    assert moved == tmp_path / "rebuild" / "trash" / "consumequeue" / "T" / "3"
    assert (moved / "00000000000000000000").read_text() == "x"
    assert not queue.exists()
    rebuild_dir.empty_trash(tmp_path)
    assert not moved.exists()


def test_unfinished_names_what_is_left(tmp_path: Path) -> None:
    assert unfinished(tmp_path) == []
    rebuild_dir.save_queue_job(
        tmp_path,
        {"state": "building", "queues": [{"topic": "T", "queue_id": 2, "reason": "cut"}]},
    )
    (tmp_path / "rebuild" / "index.request").write_text("{}")
    rebuild_dir.write_json_atomically(tmp_path / "rebuild" / "job.json", {"state": "ready"})
    lines = unfinished(tmp_path)
    assert lines == [
        "rebuild/queues.json: ConsumeQueue rebuild building (T/2)",
        "rebuild/index.request: index rebuild requested, not started",
        "rebuild/job.json: index rebuild ready",
    ]
    for name in ("queues.json", "index.request", "job.json"):
        (tmp_path / "rebuild" / name).unlink()
    (tmp_path / "rebuild" / "consumequeue" / "T").mkdir(parents=True)
    assert unfinished(tmp_path) == []  # empty directories are not side files
    (tmp_path / "rebuild" / "consumequeue" / "T" / "00000000000000000000").write_text("x")
    assert unfinished(tmp_path) == ["rebuild/consumequeue: side files of an unfinished rebuild"]
