"""Faults injected into a stopped store: bit flips, truncations, deleted directories.

Every injector takes a seeded ``random.Random``, changes the files, and returns a
:class:`~tests.faults.harness.Fault` saying what it did (file, byte, bit, length), which acks it
destroyed or hit, and whether the broker must report it. Positions are chosen among the bytes
that hold data (records, used units, used index entries, the checkpoint's fields, the config
text), never in the zero padding past the end, where a flip means nothing.

The layouts are written here from the format spec (``/work/shared/spec/store-format.md``),
not imported from ``mqcore``, and each CommitLog flip first checks that the record at the
acked position is the one acknowledged (size, body length, body digest): the injector cannot
share a layout bug with the store.

CommitLog flips land in the bytes the record format can check: the body (its CRC), the body
CRC itself, TOTALSIZE, MAGIC and BODYLENGTH (framing). RocketMQ's record has no checksum over
its other header fields or its properties (``enabledAppendPropCRC`` is off), so a flip in a
born timestamp, say, is invisible to any broker of this format; the suite does not ask for
the impossible.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import struct
from pathlib import Path
from typing import Any

from tests.faults.harness import GEOMETRY, Fault, Ledger, digest

# CommitLog record, V1 magic with IPv4 hosts (spec 1.2): what this suite's brokers write.
TOTALSIZE, MAGIC, BODYCRC, BODYLENGTH, BODY = 0, 4, 8, 84, 88
MAGIC_V1 = 0xDAA320A7
CQ_UNIT = 20
INDEX_HEADER = 40
INDEX_ENTRY = 20
CHECKPOINT_FIELDS = 40  # five int64 fields; the rest of the 4 KiB page is zero
CONFIG_FILES = (
    "topics.json",
    "subscriptionGroup.json",
    "consumerOffset.json",
    "delayOffset.json",
    "consumerFilter.json",
)
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")


# --- primitives -------------------------------------------------------------------------


def flip(path: Path, position: int, bit: int) -> str:
    """XOR one bit of one byte in place; a line saying what changed."""
    with path.open("r+b") as f:
        f.seek(position)
        old = f.read(1)[0]
        f.seek(position)
        f.write(bytes([old ^ (1 << bit)]))
    return f"{path.parent.name}/{path.name} byte {position} bit {bit} ({old:#04x}->{old ^ (1 << bit):#04x})"


def cut(path: Path, length: int) -> str:
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.truncate(length)
    return f"{path.parent.name}/{path.name} cut from {size} to {length} bytes"


def _rel(store: Path, path: Path) -> str:
    return str(path.relative_to(store))


# --- CommitLog --------------------------------------------------------------------------


def segment_size() -> int:
    return int(GEOMETRY["CAIRN_COMMITLOG_FILE_SIZE"])


def segments(store: Path) -> list[Path]:
    return sorted((store / "commitlog").iterdir(), key=lambda p: int(p.name))


def _record(store: Path, phys: int, size: int) -> tuple[Path, int, bytes]:
    base = phys - phys % segment_size()
    path = store / "commitlog" / f"{base:020d}"
    with path.open("rb") as f:
        f.seek(phys - base)
        return path, phys - base, f.read(size)


def _checked_record(store: Path, ledger: Ledger, i: int) -> tuple[Path, int, int]:
    """(segment, position, body length) of ack ``i``, after checking the record is it."""
    a = ledger.acks[i]
    path, position, raw = _record(store, a.phys_offset, a.size)
    (total,) = _INT.unpack_from(raw, TOTALSIZE)
    (magic,) = struct.unpack_from(">I", raw, MAGIC)
    (body_length,) = _INT.unpack_from(raw, BODYLENGTH)
    assert (total, magic) == (a.size, MAGIC_V1), (a.label(), total, hex(magic))
    assert digest(raw[BODY : BODY + body_length]) == a.digest, a.label()
    return path, position, body_length


def _acks_in(ledger: Ledger, start: int, end: int) -> list[int]:
    """Acks whose record starts in ``[start, end)``, by CommitLog position."""
    inside = [i for i, a in enumerate(ledger.acks) if start <= a.phys_offset < end]
    return sorted(inside, key=lambda i: ledger.acks[i].phys_offset)


def commitlog_flip(store: Path, ledger: Ledger, rng: random.Random, seed: int, where: str) -> Fault:
    """Flip one checked bit of one acknowledged record (module docstring).

    ``where``: ``older`` (mid-segment in a segment before the last), ``last`` (mid-segment in
    the last one) or ``tail`` (one of the last three records of the log).
    """
    paths = segments(store)
    size = segment_size()
    if where == "older":
        path = rng.choice(paths[:-1])
        candidates = _acks_in(ledger, int(path.name), int(path.name) + size)[2:-2]
    elif where == "last":
        path = paths[-1]
        candidates = _acks_in(ledger, int(path.name), int(path.name) + size)[2:-3]
    else:
        candidates = sorted(range(len(ledger)), key=lambda i: ledger.acks[i].phys_offset)[-3:]
    assert candidates, f"no record to hit ({where})"
    i = rng.choice(candidates)
    segment, position, body_length = _checked_record(store, ledger, i)
    if rng.random() < 0.7:
        region, offset = "body", BODY + rng.randrange(body_length)
    else:
        region, start = rng.choice(
            [
                ("TOTALSIZE", TOTALSIZE),
                ("MAGIC", MAGIC),
                ("BODYCRC", BODYCRC),
                ("BODYLENGTH", BODYLENGTH),
            ]
        )
        offset = start + rng.randrange(4)
    bit = rng.randrange(8)
    what = flip(segment, position + offset, bit)
    return Fault(
        name=f"commitlog-flip-{where}",
        seed=seed,
        description=f"{region} of {ledger.acks[i].label()}: {what}",
        files=[_rel(store, segment)],
        destroyed={i},
        expect_report=True,
    )


def commitlog_truncate(store: Path, ledger: Ledger, rng: random.Random, seed: int) -> Fault:
    """Cut a segment before the last one short, at a random length inside its records."""
    paths = segments(store)
    path = rng.choice(paths[:-1])
    base = int(path.name)
    inside = _acks_in(ledger, base, base + segment_size())
    end_of_data = max(ledger.acks[i].phys_offset + ledger.acks[i].size for i in inside) - base
    length = rng.randrange(end_of_data)
    what = cut(path, length)
    return Fault(
        name="commitlog-truncate",
        seed=seed,
        description=what,
        files=[_rel(store, path)],
        destroyed={
            i for i in inside if ledger.acks[i].phys_offset + ledger.acks[i].size > base + length
        },
        expect_report=True,
        report_by_file=True,
    )


# --- ConsumeQueue -----------------------------------------------------------------------


def cq_file_bytes() -> int:
    return int(GEOMETRY["CAIRN_CQ_FILE_ENTRIES"]) * CQ_UNIT


def _unit_file(store: Path, topic: str, queue_id: int, queue_offset: int) -> tuple[Path, int]:
    at = queue_offset * CQ_UNIT
    start = at - at % cq_file_bytes()
    return store / "consumequeue" / topic / str(queue_id) / f"{start:020d}", at - start


def cq_flip(store: Path, ledger: Ledger, rng: random.Random, seed: int) -> Fault:
    """Flip one bit of the ConsumeQueue unit of a random acknowledged message."""
    i = rng.randrange(len(ledger))
    a = ledger.acks[i]
    path, position = _unit_file(store, a.topic, a.queue_id, a.queue_offset)
    raw = path.read_bytes()[position : position + CQ_UNIT]
    assert _LONG.unpack_from(raw, 0)[0] == a.phys_offset, (a.label(), raw.hex())
    byte = rng.randrange(CQ_UNIT)
    field = "phys offset" if byte < 8 else "size" if byte < 12 else "tag code"
    what = flip(path, position + byte, rng.randrange(8))
    return Fault(
        name="cq-flip",
        seed=seed,
        description=f"{field} of the unit of {a.label()}: {what}",
        files=[_rel(store, path)],
        hit={i},
        expect_report=byte < 12,  # a unit pointing elsewhere must be noticed, a tag code need not
    )


def cq_files(store: Path) -> list[Path]:
    return sorted(p for p in (store / "consumequeue").rglob("*") if p.is_file())


def cq_truncate(store: Path, ledger: Ledger, rng: random.Random, seed: int) -> Fault:
    """Cut a random ConsumeQueue file of an acknowledged queue at a random length."""
    topics = sorted({a.topic for a in ledger.acks})
    files = [p for p in cq_files(store) if p.parent.parent.name in topics]
    path = rng.choice(files)
    length = rng.randrange(path.stat().st_size)
    topic, queue_id = path.parent.parent.name, int(path.parent.name)
    first = int(path.name) // CQ_UNIT
    hit = {
        i
        for i, a in enumerate(ledger.acks)
        if (a.topic, a.queue_id) == (topic, queue_id)
        and first + length // CQ_UNIT <= a.queue_offset < first + cq_file_bytes() // CQ_UNIT
    }
    return Fault(
        name="cq-truncate",
        seed=seed,
        description=cut(path, length),
        files=[_rel(store, path)],
        hit=hit,
        expect_report=True,
    )


# --- IndexFile --------------------------------------------------------------------------


def index_files(store: Path) -> list[Path]:
    return sorted((store / "index").iterdir())


def _index_used(path: Path) -> tuple[int, int]:
    """(used bytes, entry count) of an index file: header, slot table, entries written."""
    slots = int(GEOMETRY["CAIRN_INDEX_HASH_SLOTS"])
    with path.open("rb") as f:
        header = f.read(INDEX_HEADER)
    count = max(1, _INT.unpack_from(header, 36)[0])
    return INDEX_HEADER + slots * 4 + count * INDEX_ENTRY, count


def index_flip(store: Path, ledger: Ledger, rng: random.Random, seed: int) -> Fault:
    """Flip one bit in the used part of a random IndexFile (header, slots or entries)."""
    files = [p for p in index_files(store) if _index_used(p)[1] > 1]
    path = rng.choice(files)
    used, _ = _index_used(path)
    position = rng.randrange(used)
    slots_end = INDEX_HEADER + int(GEOMETRY["CAIRN_INDEX_HASH_SLOTS"]) * 4
    hit: set[int] = set()
    if position < INDEX_HEADER:
        region = "header"
    elif position < slots_end:
        region = "slot table"
    else:
        region = "entry"
        entry = slots_end + (position - slots_end) // INDEX_ENTRY * INDEX_ENTRY
        with path.open("rb") as f:
            f.seek(entry + 4)
            (phys,) = _LONG.unpack(f.read(8))
        hit = {i for i, a in enumerate(ledger.acks) if a.phys_offset == phys}
    what = flip(path, position, rng.randrange(8))
    return Fault(
        name="index-flip",
        seed=seed,
        description=f"{region}: {what}",
        files=[_rel(store, path)],
        hit=hit,
    )


def index_truncate(store: Path, ledger: Ledger, rng: random.Random, seed: int) -> Fault:
    path = rng.choice(index_files(store))
    length = rng.randrange(path.stat().st_size)
    return Fault(
        name="index-truncate",
        seed=seed,
        description=cut(path, length),
        files=[_rel(store, path)],
        expect_report=True,
    )


# --- checkpoint -------------------------------------------------------------------------


def checkpoint_flip(store: Path, ledger: Ledger, rng: random.Random, seed: int) -> Fault:
    path = store / "checkpoint"
    position = rng.randrange(CHECKPOINT_FIELDS)
    fields = (
        "physicMsgTimestamp",
        "logicsMsgTimestamp",
        "indexMsgTimestamp",
        "masterFlushedOffset",
        "confirmPhyOffset",
    )
    what = flip(path, position, rng.randrange(8))
    return Fault(
        name="checkpoint-flip",
        seed=seed,
        description=f"{fields[position // 8]}: {what}",
        files=["checkpoint"],
    )


def checkpoint_truncate(store: Path, ledger: Ledger, rng: random.Random, seed: int) -> Fault:
    path = store / "checkpoint"
    return Fault(
        name="checkpoint-truncate",
        seed=seed,
        description=cut(path, rng.randrange(path.stat().st_size)),
        files=["checkpoint"],
    )


# --- config files -----------------------------------------------------------------------

_BARE_INT_KEY = re.compile(r"([{,]\s*)(-?\d+)(\s*:)")


def parse_config(raw: bytes) -> Any:
    """A config file's content, or None when it does not parse (fastjson writes bare integer
    keys in consumerOffset.json: they are quoted first)."""
    try:
        text = raw.decode("utf-8")
        return json.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', text)) if text.strip() else None
    except (UnicodeDecodeError, ValueError):
        return None


def config_flip(store: Path, ledger: Ledger, rng: random.Random, seed: int, name: str) -> Fault:
    """Flip one bit anywhere in ``config/<name>``. When the file still parses (a digit became
    another digit, a letter of a name changed) no broker of this format can tell; the run
    then only asks that nothing acknowledged is lost (``notes`` says which case it was)."""
    path = store / "config" / name
    raw = path.read_bytes()
    position = rng.randrange(len(raw))
    what = flip(path, position, rng.randrange(8))
    before, after = parse_config(raw), parse_config(path.read_bytes())
    effect = "syntax" if after is None else "value" if after != before else "none"
    return Fault(
        name=f"config-flip-{name}",
        seed=seed,
        description=f"{what} (the file {'no longer parses' if effect == 'syntax' else 'still parses'})",
        files=[f"config/{name}"],
        expect_report=effect == "syntax",
        notes=[f"effect: {effect}"],
    )


def config_truncate(store: Path, ledger: Ledger, rng: random.Random, seed: int, name: str) -> Fault:
    path = store / "config" / name
    return Fault(
        name=f"config-truncate-{name}",
        seed=seed,
        description=cut(path, rng.randrange(path.stat().st_size)),
        files=[f"config/{name}"],
        expect_report=True,
        notes=["effect: syntax"],
    )


# --- whole directories --------------------------------------------------------------------


def delete_dir(store: Path, ledger: Ledger, rng: random.Random, seed: int, name: str) -> Fault:
    """Delete ``consumequeue/`` or ``index/`` (every derived file of that kind)."""
    shutil.rmtree(store / name)
    return Fault(
        name=f"delete-{name}",
        seed=seed,
        description=f"deleted {name}/ after the broker stopped",
        files=[name],
        hit=set(range(len(ledger))),
        expect_report=True,
    )
