"""The store's ``checkpoint`` file: how far each part of the store is known durable (spec 5.1).

Layout, RocketMQ's ``StoreCheckpoint`` byte for byte (4096 bytes, big-endian int64)::

    offset  field                   set by
    ------  ----------------------  ----------------------------------------------------
         0  physic_msg_timestamp    CommitLog flush: store time of the last flushed record
         8  logics_msg_timestamp    ConsumeQueue flush: snapshot taken before a thorough flush
        16  index_msg_timestamp     end timestamp of the last index file filled and flushed
        24  master_flushed_offset   HA (slave)
        32  confirm_phy_offset      last confirmed CommitLog offset (after recovery)
        40  zeros up to 4096

Invariants: the file is always exactly 4096 bytes; the in-memory values only move forward
in practice, but this module stores whatever it is given.

Crash behaviour: RocketMQ maps the file and forces it in place, so a crash mid-write can
tear it. Cairn never writes in place (STYLE 4, Kafka ``CheckpointFile``): ``flush`` writes
``checkpoint.tmp``, fsyncs it, renames it over ``checkpoint`` and fsyncs the directory, so
the file is always either the old or the new 4096 bytes. The bytes stay RocketMQ's layout
(no version, no CRC) so either broker can open the other's store. A leftover
``checkpoint.tmp`` is ignored and overwritten. A missing file reads as all zeros.
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from mqcore.store.files.mapped_file import fsync_directory

CHECKPOINT_LAYOUT = struct.Struct(
    ">"
    "q"  # physic_msg_timestamp (epoch ms)
    "q"  # logics_msg_timestamp (epoch ms)
    "q"  # index_msg_timestamp (epoch ms)
    "q"  # master_flushed_offset
    "q"  # confirm_phy_offset
)
#: The file is mapped at one OS page in RocketMQ; the tail is zero.
CHECKPOINT_FILE_SIZE = 4096
#: Field names in file order; field ``i`` starts at ``struct.calcsize(">" + "q" * i)``.
CHECKPOINT_FIELDS = (
    "physic_msg_timestamp",
    "logics_msg_timestamp",
    "index_msg_timestamp",
    "master_flushed_offset",
    "confirm_phy_offset",
)
#: RocketMQ backs off 3 s from the older of the two flush timestamps (``getMinTimestamp``).
_MIN_TIMESTAMP_MARGIN_MS = 3000


@dataclass
class Checkpoint:
    """The five checkpoint values, and where they are saved.

    Thread-safety: services assign fields directly (an int assignment is atomic);
    ``flush`` is serialized by a lock and writes a snapshot of all five.
    """

    path: Path
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Self:
        """Read ``path``; a missing file gives all zeros, a short one is zero-extended.

        Raises:
            OSError: the file exists but cannot be read.
        """
        path = Path(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return cls(path)
        return cls.from_bytes(path, data)

    @classmethod
    def from_bytes(cls, path: str | os.PathLike[str], data: bytes) -> Self:
        """Decode the first 40 bytes of a checkpoint image (zero-extended if shorter)."""
        head = data[: CHECKPOINT_LAYOUT.size].ljust(CHECKPOINT_LAYOUT.size, b"\0")
        return cls(Path(path), *CHECKPOINT_LAYOUT.unpack(head))

    def to_bytes(self) -> bytes:
        """The 4096-byte file image."""
        packed = CHECKPOINT_LAYOUT.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )
        return packed.ljust(CHECKPOINT_FILE_SIZE, b"\0")

    def flush(self) -> None:
        """Write the file atomically: temp file, fsync, rename, fsync the directory.

        Thread-safe.

        Raises:
            OSError: the write failed; the previous file is left intact.
        """
        with self._lock:
            image = self.to_bytes()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(image)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError:
                tmp.unlink(missing_ok=True)  # a full disk leaves no half-written temp file
                raise
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            fsync_directory(self.path.parent)

    def min_timestamp(self) -> int:
        """``max(0, min(physic, logics) - 3000)``: where abnormal recovery may start (5.7)."""
        oldest = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        return max(0, oldest - _MIN_TIMESTAMP_MARGIN_MS)

    def min_timestamp_index(self) -> int:
        """``min(min_timestamp(), index_msg_timestamp)``."""
        return min(self.min_timestamp(), self.index_msg_timestamp)
