"""The runtime records every CommitLog file cleanup deletes in the audit log: directly for
its own cleanup loop, and from the journal a Celery worker's cleanup writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from accounts.models import AuditEntry
from cairn.runtime import BrokerRuntime
from mqcore.services import deletions
from mqcore.services.config import ServicesConfig
from mqcore.services.deletions import Deletion
from mqcore.store import StoreConfig

SMALL = StoreConfig(commitlog_file_size=8 * 1024, consume_queue_file_entries=16)


def _deletion(name: str, reason: str) -> Deletion:
    return Deletion(
        name, 0, 8192, reason, 1_700_000_000_000, {"age_hours": 0.5, "disk_usage": 0.93}
    )


@pytest.mark.django_db(transaction=True)
def test_deletions_reach_the_audit_log_directly_and_through_the_journal(tmp_path: Path) -> None:
    rt = BrokerRuntime(
        store_dir=tmp_path / "store",
        services_mode="inline",
        store_config=SMALL,
        services_config=ServicesConfig(clean_first_delay_ms=3_600_000),
    )
    # Left by a worker (or an earlier run) before this broker started: drained at start.
    deletions.journal_hook(tmp_path / "store")(_deletion("00000000000000000000", "expired"))
    rt.start()
    try:
        assert AuditEntry.objects.filter(action="store.segment.delete").count() == 1
        rt.audit_deletion(_deletion("00000000000000008192", "forced"))
        deletions.journal_hook(tmp_path / "store")(_deletion("00000000000000016384", "expired"))
        journal = next(loop for loop in rt.loops if loop.name == "deletion_journal")
        assert journal.step().detail == {"recorded": 1}
        assert journal.step().detail == {"recorded": 0}
    finally:
        rt.stop()
    rows = list(AuditEntry.objects.filter(action="store.segment.delete").order_by("id"))
    assert [(r.target, r.new_value["reason"]) for r in rows] == [
        ("00000000000000000000", "expired"),
        ("00000000000000008192", "forced"),
        ("00000000000000016384", "expired"),
    ]
    forced = rows[1]
    assert forced.username == "cleanup" and forced.target_type == "commitlog_segment"
    assert forced.old_value == {"first_offset": 0, "end_offset": 8192}
    assert forced.new_value["disk_usage"] == 0.93
