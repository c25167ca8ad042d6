"""Tiered storage services (spec 10): the upload dispatcher and tier retention as steps.

* ``tiered_upload``: :func:`mqcore.tiered.dispatcher.upload_step` — copies new messages of
  every queue to the tier and uploads on group commit. Inline it is a wake-able
  :class:`~mqcore.services.runner.ServiceLoop` every :data:`UPLOAD_INTERVAL_S` (RocketMQ's
  dispatcher runs every 20 s plus wake-ups; a few seconds keeps the tier close behind);
  in Celery mode the ``cairn.tiered_upload`` task.
* ``tiered_retention``: :func:`mqcore.tiered.retention.retention_step` — hourly
  (``tieredStoreFileReservedTime`` is checked every hour); ``cairn.tiered_retention``.

One process runs them per store: the inline broker holds ``<store>/locks/tiered`` for its
whole life; a Celery task takes it for the run and returns ``skipped`` when it is held.
"""

from __future__ import annotations

from mqcore.metadata.topics import TopicConfigManager
from mqcore.services.result import StepResult
from mqcore.store.store import MessageStore
from mqcore.tiered.dispatcher import upload_step as dispatch
from mqcore.tiered.retention import TopicAttributes
from mqcore.tiered.retention import retention_step as expire
from mqcore.tiered.storage import TieredStorage

UPLOAD_INTERVAL_S = 5.0
RETENTION_INTERVAL_S = 3600.0
#: The service lock (``<store>/locks/tiered``) the one tier writer of a store holds.
LOCK_NAME = "tiered"


def upload(store: MessageStore, tier: TieredStorage, *, force: bool = False) -> StepResult:
    """One upload pass; upload errors are in ``detail["errors"]`` (the step still runs
    again: the next pass resumes from the commit offset)."""
    result = dispatch(store, tier, force=force)
    return StepResult(
        "tiered_upload",
        result.progressed,
        "error" if result.errors else "ok",
        result.as_dict(),
    )


def retention(tier: TieredStorage, topic_attributes: TopicAttributes | None) -> StepResult:
    """One retention pass."""
    result = expire(tier, topic_attributes)
    return StepResult(
        "tiered_retention",
        result.progressed,
        "error" if result.errors else "ok",
        result.as_dict(),
    )


def topic_attributes_of(topics: TopicConfigManager) -> TopicAttributes:
    """``topic -> attributes`` over a loaded topic manager (``reserve.time`` lives there)."""

    def attributes(topic: str) -> dict[str, str] | None:
        config = topics.get(topic)
        return dict(config.attributes) if config is not None else None

    return attributes
