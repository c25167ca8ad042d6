"""The process role names a store opens with (the interface of ``CAIRN_SERVICES``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.services import inline
from mqcore.store import MessageStore
from mqcore.store.sharing.process_role import PROCESS_ROLES, check_process_role


def test_the_three_roles_keep_their_names() -> None:
    assert PROCESS_ROLES == ("standalone", "broker", "services")
    assert [inline.store_role(mode) for mode in ("inline", "celery")] == ["standalone", "broker"]


@pytest.mark.parametrize("role", PROCESS_ROLES)
def test_every_role_opens_writable(role: str) -> None:
    assert check_process_role(role, readonly=False) == role


def test_a_read_only_open_is_standalone_only() -> None:
    assert check_process_role("standalone", readonly=True) == "standalone"
    for role in ("broker", "services"):
        with pytest.raises(ValueError, match="standalone if readonly"):
            check_process_role(role, readonly=True)


def test_an_unknown_role_is_refused_by_the_store(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="role must be one of"):
        MessageStore(tmp_path, role="worker")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="standalone if readonly"):
        MessageStore(tmp_path, readonly=True, role="broker")
