"""``manage.py rebuildindex``: offline, and beside a running broker."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from mqcore.services import inline
from mqcore.store import MessageStore
from tests.mqcore.services.conftest import SMALL, drain, put_many


def found(store: MessageStore, keys: range) -> list[int]:
    return [i for i in keys if store.query_by_key("Orders", f"K{i}", 0, 2**62)]


def test_offline_rebuild_of_a_lost_index_and_of_the_queues(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        put_many(store, 400)
    shutil.rmtree(tmp_path / "index")
    out = io.StringIO()
    call_command("rebuildindex", store=str(tmp_path), step_bytes=8192, stdout=out)
    assert "Index rebuilt: 400 records." in out.getvalue()
    assert "100.0%" in out.getvalue()
    shutil.rmtree(tmp_path / "consumequeue" / "Orders" / "1")
    call_command("rebuildindex", store=str(tmp_path), queues=True, stdout=io.StringIO())
    with MessageStore(tmp_path, SMALL) as store:
        assert found(store, range(0, 400, 17)) == list(range(0, 400, 17))
        assert drain(store, "Orders", 1) == [f"order {i}".encode() for i in range(1, 400, 2)]


def test_rebuild_beside_a_running_broker(tmp_path: Path) -> None:
    store = MessageStore(tmp_path, SMALL).open()
    loops = inline.build_service_loops(store)
    for loop in loops:
        loop.start()
    try:
        put_many(store, 300)
        with pytest.raises(CommandError, match="stop it to rebuild the ConsumeQueues"):
            call_command("rebuildindex", store=str(tmp_path), queues=True, stdout=io.StringIO())
        out = io.StringIO()
        call_command("rebuildindex", store=str(tmp_path), wait=60, stdout=out)
        assert "building the index beside it" in out.getvalue()
        assert "Index rebuilt: 300 records." in out.getvalue()
        assert found(store, range(0, 300, 7)) == list(range(0, 300, 7))
    finally:
        for loop in loops:
            loop.stop()
        store.close()


def test_a_directory_without_a_commitlog(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="no CommitLog"):
        call_command("rebuildindex", store=str(tmp_path), stdout=io.StringIO())
