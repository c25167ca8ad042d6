"""Tiered storage (spec 10): per-queue flat files copied to a second, cheaper backend.

* :mod:`mqcore.tiered.backend`: the segment backend interface and its errors.
* :mod:`mqcore.tiered.memory`, :mod:`mqcore.tiered.posix`: the two backends.
* :mod:`mqcore.tiered.flat_file`: one queue's flat CommitLog and flat ConsumeQueue.
* :mod:`mqcore.tiered.metadata`: upload progress in ``config/tieredStoreMetadata.json``.
* :mod:`mqcore.tiered.storage`: a store's tier (backend, metadata, flat files, key index).
* :mod:`mqcore.tiered.dispatcher`: the upload step; :mod:`mqcore.tiered.retention`: expiry.
* :mod:`mqcore.tiered.key_index`: key -> queue offset index kept in the tier.
* :mod:`mqcore.tiered.tiered_store`: reads through the tier (read strategies, read-ahead).
"""

from mqcore.tiered.backend import (
    SegmentBackend,
    SegmentExistsError,
    SegmentId,
    SegmentMissingError,
    SegmentPositionError,
    SegmentSealedError,
    SegmentType,
    TieredStoreError,
)
from mqcore.tiered.config import TieredConfig
from mqcore.tiered.flat_file import FlatFile, ResumeReport
from mqcore.tiered.memory import MemoryBackend
from mqcore.tiered.metadata import QueueProgress, SegmentMeta, SegmentStatus, TieredMetadataStore
from mqcore.tiered.posix import PosixBackend

__all__ = [
    "FlatFile",
    "MemoryBackend",
    "PosixBackend",
    "QueueProgress",
    "ResumeReport",
    "SegmentBackend",
    "SegmentExistsError",
    "SegmentId",
    "SegmentMeta",
    "SegmentMissingError",
    "SegmentPositionError",
    "SegmentSealedError",
    "SegmentStatus",
    "SegmentType",
    "TieredConfig",
    "TieredMetadataStore",
    "TieredStoreError",
]
