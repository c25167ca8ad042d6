"""``<root>/services/progress``: offsets the store's processes publish to each other.

With ``CAIRN_SERVICES=celery`` one store is worked on by several processes on one host: the
broker appends to the CommitLog, a Celery worker dispatches it to the ConsumeQueues and the
IndexFile (reput), another flushes, another cleans up. Each keeps its positions in memory;
this file is how the others see them. It is a Cairn file, not part of RocketMQ's layout
(RocketMQ ignores unknown names in the store root).

Layout: 4096 bytes, mapped shared by every process, an array of int64 *slots* in the host's
native byte order (the file never leaves the host: the services must run where the store is)::

    slot  name                      written by          meaning
    ----  ------------------------  ------------------  ---------------------------------------
       0  MAGIC                     whoever creates it  b"CAIRNPG1" as an int
       1  GENERATION                CommitLog writer    +1 at every open that recovers the log
       2  MAX_OFFSET                CommitLog writer    end of the last appended record
       3  CONFIRM_OFFSET            CommitLog writer    how far reput may dispatch (spec 6.1)
       4  FLUSHED_OFFSET            CommitLog writer    what the writer itself flushed
       5  WRITER_PID                CommitLog writer    its pid; 0 after a clean close
       6  RECOVERED_END             CommitLog writer    the log end recovery found at open
       7  LAST_EXIT_OK              CommitLog writer    1 if that open found a clean shutdown
       8  REPUT_GENERATION          reput holder        the GENERATION its state matches
       9  REPUT_OFFSET              reput holder        everything below is dispatched
      10  LOGICS_TIMESTAMP          reput holder        store time of the last record dispatched
      11  INDEX_TIMESTAMP           reput holder        end time of the last index file filled
      12  INDEX_GENERATION          reput holder        +1 when the index directory is replaced
      13  SERVICES_FLUSHED_OFFSET   flush service       CommitLog fdatasync'ed up to here
      14  DISK_FLAGS                cleanup service     bit 0 DISK_FULL, bit 1 LOGIC_DISK_FULL
      15  DISK_USAGE_PPM            cleanup service     CommitLog partition usage, parts per 1e6
      16  CLEANUP_GENERATION        cleanup service     +1 after every run that deleted files
      17  COMMITLOG_MIN_OFFSET      cleanup service     CommitLog min offset after that run
      18  REBUILD_READY             index builder       1: a rebuilt index waits for the swap
      19  REBUILD_CURSOR            index builder       the rebuilt index covers the log below
      20  ATTACH_COUNT              reput holder        +1 each time a runner takes over reput
      21  REPUT_HOLDER_PID          reput holder        its pid while attached, else 0

Invariants:
  * Every slot has exactly one writer (the table's second column), so no slot needs a lock
    across processes; a writer with several threads serialises its own updates.
  * A value is published only after what it describes is in place: MAX_OFFSET after the
    record bytes are copied into the shared mapping, REPUT_OFFSET after the ConsumeQueue
    units and index entries below it are written. A reader bounded by a published value
    therefore never sees half a record or half a unit (stores become visible in program
    order on x86-64's TSO; see the README for other CPUs).
  * Slots are written with one aligned 8-byte store (``memoryview.cast("q")`` item
    assignment is a single ``memcpy`` of 8 bytes), so readers see old or new, not a mix.

Crash behaviour: never flushed; nothing here must survive a power cut. After a host crash the
broker's recovery bumps GENERATION and every other process starts over from the files.
"""

from __future__ import annotations

import json
import mmap
import os
from enum import IntEnum
from pathlib import Path
from typing import Any

from mqcore.format.msgid import HostAddress
from mqcore.store.config import StoreConfig
from mqcore.store.files import space
from mqcore.store.files.mapped_file import fsync_directory

PROGRESS_FILE_SIZE = 4096
MAGIC = int.from_bytes(b"CAIRNPG1", "big")
DISK_FULL = 1
LOGIC_DISK_FULL = 2


class Slot(IntEnum):
    """Slot numbers; byte position is ``slot * 8``."""

    MAGIC = 0
    GENERATION = 1
    MAX_OFFSET = 2
    CONFIRM_OFFSET = 3
    FLUSHED_OFFSET = 4
    WRITER_PID = 5
    RECOVERED_END = 6
    LAST_EXIT_OK = 7
    REPUT_GENERATION = 8
    REPUT_OFFSET = 9
    LOGICS_TIMESTAMP = 10
    INDEX_TIMESTAMP = 11
    INDEX_GENERATION = 12
    SERVICES_FLUSHED_OFFSET = 13
    DISK_FLAGS = 14
    DISK_USAGE_PPM = 15
    CLEANUP_GENERATION = 16
    COMMITLOG_MIN_OFFSET = 17
    REBUILD_READY = 18
    REBUILD_CURSOR = 19
    ATTACH_COUNT = 20
    REPUT_HOLDER_PID = 21


def services_dir(root: str | os.PathLike[str]) -> Path:
    """``<root>/services``: the progress file, the published config and service status."""
    return Path(root) / "services"


class Progress:
    """The mapped progress file of one store. Thread-safe per slot (see module docstring)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Open (creating if missing) ``<root>/services/progress`` and map it shared.

        Raises:
            DiskFullError: no space for the file's one block.
            OSError: the file cannot be created or mapped.
        """
        directory = services_dir(root)
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "progress"
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < PROGRESS_FILE_SIZE:
                os.ftruncate(fd, PROGRESS_FILE_SIZE)  # growing only: never clears a value
            # Its blocks before the mapping is written: a store into a hole on a full disk
            # is a SIGBUS (``space.py``). DiskFullError instead, nothing written.
            space.reserve(fd, 0, PROGRESS_FILE_SIZE, self.path)
            self._mm: mmap.mmap | None = mmap.mmap(fd, PROGRESS_FILE_SIZE)
        finally:
            os.close(fd)
        self._slots: memoryview | None = memoryview(self._mm).cast("q")
        if self._slots[Slot.MAGIC] != MAGIC:
            self._slots[Slot.MAGIC] = MAGIC

    def get(self, slot: Slot) -> int:
        """The slot's current value (0 if never written)."""
        slots = self._slots
        return int(slots[slot]) if slots is not None else 0

    def set(self, slot: Slot, value: int) -> None:
        """Publish ``value``. Only the slot's writer calls this."""
        slots = self._slots
        if slots is not None:
            slots[slot] = value

    def raise_to(self, slot: Slot, value: int) -> None:
        """Publish ``value`` if it is larger (offsets only move forward between opens)."""
        slots = self._slots
        if slots is not None and value > slots[slot]:
            slots[slot] = value

    def increment(self, slot: Slot) -> int:
        """Add one to a counter slot and return the new value. Only its writer calls this."""
        value = self.get(slot) + 1
        self.set(slot, value)
        return value

    def snapshot(self) -> dict[str, int]:
        """Every named slot, for status pages."""
        return {slot.name.lower(): self.get(slot) for slot in Slot if slot is not Slot.MAGIC}

    def close(self) -> None:
        """Unmap. Values stay in the file for the next process."""
        if self._slots is not None:
            self._slots.release()
            self._slots = None
        if self._mm is not None:
            self._mm.close()
            self._mm = None


# -- the store's geometry, published for the service processes -------------------------------

#: StoreConfig fields a service process must share with the broker: segment geometry (a
#: mismatch cannot even load the files) and what dispatch depends on.
SHARED_CONFIG_FIELDS = (
    "commitlog_file_size",
    "consume_queue_file_entries",
    "index_hash_slots",
    "index_max_entries",
    "flush",
    "max_message_size",
    "check_crc_on_recover",
    "message_index_enable",
    "message_delay_level",
    "store_host",
    "broker_name",
    "cluster_name",
)


def publish_config(root: str | os.PathLike[str], config: StoreConfig) -> None:
    """Write ``<root>/services/store.json`` (atomically) so workers open the same geometry.

    Raises:
        OSError: the file cannot be written.
    """
    directory = services_dir(root)
    directory.mkdir(parents=True, exist_ok=True)
    values: dict[str, Any] = {}
    for name in SHARED_CONFIG_FIELDS:
        value = getattr(config, name)
        values[name] = value._asdict() if isinstance(value, HostAddress) else value
    text = json.dumps(values, indent=2, sort_keys=True) + "\n"
    tmp = directory / "store.json.tmp"
    tmp.write_text(text)
    os.replace(tmp, directory / "store.json")
    fsync_directory(directory)


def published_config(root: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The fields :func:`publish_config` wrote, ready for ``StoreConfig(**fields)``; None if
    no writer has published yet."""
    try:
        raw = json.loads((services_dir(root) / "store.json").read_text())
    except FileNotFoundError:
        return None
    fields = {name: raw[name] for name in SHARED_CONFIG_FIELDS if name in raw}
    host = fields.get("store_host")
    if isinstance(host, dict):
        fields["store_host"] = HostAddress(**host)
    return fields
