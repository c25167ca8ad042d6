"""``python -m mqcore``: offline tools for a store directory (check, dump, query, view).

Every command opens the store read-only: segments are mapped ``ACCESS_READ``, the writer lock
is not taken and no recovery runs, so the tools are safe next to a running broker and on a
copy of a crashed store. File sizes are read from the files unless given
(``mqcore.store.recovery.geometry``).

Exit codes::

    0   done; for ``check``: no defect
    1   ``check`` found defects; ``dump``/``query``/``view`` found nothing; the store is unreadable
    2   usage: bad arguments, no such store directory

Errors are one line on stderr (``--debug`` shows the traceback of an unexpected one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, TextIO

from mqcore.clock import SystemClock
from mqcore.errors import CorruptIndexError, MQError, ValidationError
from mqcore.format.body_crc import body_crc
from mqcore.format.layout import MESSAGE_MAGIC_CODE_V2
from mqcore.format.record import Blank, Valid, check_record, decode_record
from mqcore.message import MessageExt
from mqcore.metadata.check import check_config_dir
from mqcore.store.commit_log import CommitLog
from mqcore.store.index.index_service import IndexService
from mqcore.store.read import queries
from mqcore.store.recovery.geometry import Geometry, infer_geometry
from mqcore.store.recovery.verify import CheckReport, QuarantineInfo, check_store

__all__ = ["main"]

EXIT_OK, EXIT_FOUND_NOTHING, EXIT_USAGE = 0, 1, 2
DEFAULT_BODY_BYTES = 256
DEFAULT_MAX_DEFECTS = 1000
LIST_ROWS = 50  # rows per table in check's text output; --json lists everything
PROGRESS_INTERVAL_S = 1.0

EPILOG = """\
examples:
  python -m mqcore check /data/store                 verify every record, unit and index entry
  python -m mqcore check /data/store --json > report.json
  python -m mqcore dump /data/store --offset 0 --count 3
  python -m mqcore query /data/store --topic TopicTest --key order-42
  python -m mqcore query /data/store --topic TopicTest --key order-42 --begin 2024-05-01T00:00
  python -m mqcore view /data/store --id 0A00000500002A9F000000004000007B
  python -m mqcore view /data/store --id C0A8000130391B6D35860A1B2C3D0001 --topic TopicTest

exit codes: 0 ok, 1 defects found or nothing found, 2 usage error.
Sizes (--commitlog-file-size etc.) are read from the store's files unless given; they accept
K, M and G suffixes (powers of 1024).
"""

_SYS_FLAG_NAMES = (
    (0x1, "COMPRESSED"),
    (0x2, "MULTI_TAGS"),
    (0x10, "BORNHOST_V6"),
    (0x20, "STOREHOST_V6"),
    (0x40, "NEED_UNWRAP"),
    (0x80, "INNER_BATCH"),
)
_TRANSACTION_NAMES = {
    0x4: "TRANSACTION_PREPARED",
    0x8: "TRANSACTION_COMMIT",
    0xC: "TRANSACTION_ROLLBACK",
}


class UsageError(Exception):
    """Bad input the user can fix: exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line, not the usage block plus a line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI. Returns the exit code (module docstring)."""
    args = build_parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.run
    try:
        return command(args)
    except (UsageError, ValidationError) as exc:
        return _fail(args, exc, EXIT_USAGE)
    except BrokenPipeError:  # stdout closed early (`| head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except (MQError, OSError) as exc:
        return _fail(args, exc, EXIT_FOUND_NOTHING)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(
            f"mqcore {args.command}: internal error: {type(exc).__name__}: {exc} "
            "(rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return EXIT_FOUND_NOTHING


def _fail(args: argparse.Namespace, exc: BaseException, code: int) -> int:
    print(f"mqcore {args.command}: {exc}", file=sys.stderr)
    return code


# --- arguments --------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = _Parser(
        prog="python -m mqcore",
        description="Offline tools for a Cairn / RocketMQ store directory. Read-only: they "
        "never take the writer lock and never modify a file.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _Parser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    common.add_argument("store", type=Path, help="the store directory (holds commitlog/)")
    sizes = common.add_argument_group("store geometry (default: read from the files)")
    sizes.add_argument("--commitlog-file-size", type=_size, metavar="BYTES")
    sizes.add_argument("--consume-queue-file-size", type=_size, metavar="BYTES")
    sizes.add_argument("--index-hash-slots", type=_positive, metavar="N")
    sizes.add_argument("--index-max-entries", type=_positive, metavar="N")
    json_flag = _Parser(add_help=False)
    json_flag.add_argument("--json", action="store_true", help="print JSON instead of text")

    check = sub.add_parser(
        "check", parents=[common, json_flag], help="verify the whole store",
        description="Scan every CommitLog record (with its CRC), every ConsumeQueue unit and "
        "every index entry; print the segments, queues and index files, one line per defect "
        "and a summary. Exit 1 if any defect is found.",
    )  # fmt: skip
    check.add_argument("--max-defects", type=_positive, default=DEFAULT_MAX_DEFECTS,
                       metavar="N", help="print at most N defect lines (all are counted)")  # fmt: skip
    check.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    check.set_defaults(run=_cmd_check)

    dump = sub.add_parser(
        "dump", parents=[common, json_flag], help="decode records from a CommitLog offset",
        description="Decode COUNT records starting at the physical offset OFFSET, which must "
        "be the start of a record (blank end-of-segment records are skipped).",
    )  # fmt: skip
    dump.add_argument("--offset", type=_non_negative, required=True, metavar="PHYS_OFFSET")
    dump.add_argument("--count", type=_positive, default=1, metavar="K")
    _body_flag(dump)
    dump.set_defaults(run=_cmd_dump)

    query = sub.add_parser(
        "query", parents=[common, json_flag], help="find messages by key",
        description="Find the messages of TOPIC whose KEYS (or UNIQ_KEY) contain KEY, stored "
        "between --begin and --end (epoch ms or ISO local time), oldest first.",
    )  # fmt: skip
    query.add_argument("--topic", required=True)
    query.add_argument("--key", required=True)
    query.add_argument("--begin", type=_time_ms, default=0, metavar="TIME")
    query.add_argument("--end", type=_time_ms, default=2**62, metavar="TIME")
    query.add_argument("--max", type=_positive, default=32, metavar="N", dest="max_count")
    _body_flag(query)
    query.set_defaults(run=_cmd_query)

    view = sub.add_parser(
        "view", parents=[common, json_flag], help="show one message by id",
        description="Show the message with this offsetMsgId (store host + CommitLog offset) or "
        "client id (UNIQ_KEY, looked up in the index of every topic, or of --topic).",
    )  # fmt: skip
    view.add_argument("--id", required=True, dest="msg_id")
    view.add_argument("--topic", help="look the UNIQ_KEY up in this topic only")
    _body_flag(view)
    view.set_defaults(run=_cmd_view)
    return parser


def _body_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--body-bytes", type=_non_negative, default=DEFAULT_BODY_BYTES, metavar="N",
        help=f"show the first N body bytes (default {DEFAULT_BODY_BYTES})",
    )  # fmt: skip


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    clean = text.strip().upper().removesuffix("IB").removesuffix("B")
    factor = units.get(clean[-1:], 1)
    digits = clean[:-1] if clean[-1:] in units else clean
    if not digits.isdigit() or int(digits) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size in bytes (e.g. 65536, 64K, 1G)")
    return int(digits) * factor


def _positive(text: str) -> int:
    if not text.strip().isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def _non_negative(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative integer")
    return int(text)


def _time_ms(text: str) -> int:
    if text.strip().lstrip("-").isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither epoch milliseconds nor an ISO date-time"
        ) from None


# --- opening the store ------------------------------------------------------------------


def _store_dir(path: Path) -> Path:
    if not path.is_dir():
        raise UsageError(f"{path}: no such directory")
    if not (path / "commitlog").is_dir():
        raise UsageError(f"{path}: not a store directory (it has no commitlog/)")
    return path


def _geometry(args: argparse.Namespace) -> Geometry:
    return infer_geometry(
        args.store,
        commitlog_file_size=args.commitlog_file_size,
        consume_queue_file_size=args.consume_queue_file_size,
        index_hash_slots=args.index_hash_slots,
        index_max_entries=args.index_max_entries,
    )


class _ReadOnlyStore:
    """The CommitLog and every index file, mapped read-only, nothing recovered.

    Unlike ``MessageStore(readonly=True)``, which finds the end of data as recovery would,
    this shows what is on disk: ``dump`` can read past a torn record of a crashed store, and
    ``check`` says where recovery will cut. Queries re-check every key against the record.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.root = _store_dir(args.store)
        config = _geometry(args).store_config()
        self.commit_log = CommitLog(self.root, config, SystemClock(), readonly=True)
        self.index = IndexService(
            self.root, config.index_hash_slots, config.index_max_entries, readonly=True
        )

    def __enter__(self) -> _ReadOnlyStore:
        self.commit_log.load()
        try:
            self.index.load(True, 0)
        except CorruptIndexError as exc:
            print(
                f"mqcore: warning: index files unusable ({exc}); lookups by key and by "
                "UNIQ_KEY find nothing (run check)",
                file=sys.stderr,
            )
        except BaseException:
            self.commit_log.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.index.close()
        self.commit_log.close()

    def topics(self) -> list[str]:
        directory = self.root / "consumequeue"
        if not directory.is_dir():
            return []
        return sorted(p.name for p in directory.iterdir() if p.is_dir())


# --- check ------------------------------------------------------------------------------


class _ProgressPrinter:
    """Progress lines on stderr, at most one a second, none for a check under a second."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream
        self.last = time.monotonic()

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or now - self.last < PROGRESS_INTERVAL_S:
            return
        self.last = now
        percent = 100 * done // total if total else 100
        stream = self.stream or sys.stderr
        print(f"check: {phase} {percent}% ({done} of {total})", file=stream, flush=True)


def _cmd_check(args: argparse.Namespace) -> int:
    root = _store_dir(args.store)
    report = check_store(root, _geometry(args), progress=_ProgressPrinter(not args.quiet))
    for finding in check_config_dir(root / "config"):  # integrity of the config files
        if finding.defect:
            report.defect(f"config: {finding.text}")
        else:
            report.notes.append(f"config: {finding.text}")
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        _print_check(report, args.max_defects)
    return EXIT_OK if report.ok else EXIT_FOUND_NOTHING


def _print_check(report: CheckReport, max_defects: int) -> None:
    out: list[str] = [f"store       {report.root}"]
    out.append(
        "last exit   " + ("clean" if report.last_exit_ok else "abnormal (abort file present)")
    )
    out += [f"geometry    {note}" for note in report.geometry.notes]
    cp = report.checkpoint
    out.append(
        "checkpoint  "
        + ", ".join(
            f"{k.removesuffix('_msg_timestamp')} {_ts(v)}"
            for k, v in cp.items()
            if k.endswith("timestamp")
        )
        + f", confirm offset {cp.get('confirm_phy_offset', 0)}"
    )
    sizes = report.record_sizes
    out.append(
        f"commitlog   {_count(len(report.segments), 'segment')}, {_count(sizes.count, 'record')}, "
        f"phys {report.log_min_offset} .. {report.log_end_offset}"
    )
    out.append(
        f"records     sizes min {sizes.min_bytes}, mean {sizes.mean_bytes:.1f}, "
        f"max {sizes.max_bytes} bytes; {sizes.total_bytes} bytes in all"
    )
    out += _rows(
        f"  {s.name}  {s.records:>9} records  {s.used_bytes:>11} bytes used"
        f"{'  +blank' if s.ends_with_blank else '        '}  stored {_ts(s.first_store_ms)} .. {_ts(s.last_store_ms)}"
        for s in report.segments
    )
    topics = {q.topic for q in report.queues}
    out.append(f"queues      {_count(len(topics), 'topic')}, {_count(len(report.queues), 'queue')}")
    out += _rows(
        f"  {q.topic}/{q.queue_id}  offsets {q.min_offset} .. {q.max_offset}  "
        f"{q.units_ok} units ok, {q.expired_units} expired, {q.files} files"
        for q in report.queues
    )
    entries = sum(f.entries for f in report.index_files)
    out.append(f"index       {_count(len(report.index_files), 'file')}, {entries} entries")
    out += _rows(
        f"  {f.name}  {f.entries}/{f.max_entries - 1} entries  phys {f.begin_phys_offset} .. "
        f"{f.end_phys_offset}  stored {_ts(f.begin_timestamp)} .. {_ts(f.end_timestamp)}"
        for f in report.index_files
    )
    if report.quarantine:
        corrupt = [q for q in report.quarantine if q.kind == "corrupt"]
        open_ = sum(1 for q in corrupt if not q.acknowledged)
        tails = len(report.quarantine) - len(corrupt)
        out.append(
            f"quarantine  {_count(len(corrupt), 'corrupt range')} ({open_} not acknowledged), "
            f"{_count(tails, 'torn tail copy', 'torn tail copies')}"
        )
        out += _rows(_quarantine_row(q) for q in report.quarantine)
    out += [f"note: {note}" for note in report.notes]
    out += [f"defect: {line}" for line in report.defects[:max_defects]]
    if report.defect_count > max_defects:
        out.append(f"defect: ... and {report.defect_count - max_defects} more (--max-defects)")
    counts = (
        f"{sizes.count} records in {len(report.segments)} segments, "
        f"{sum(q.units_ok for q in report.queues)} units in {len(report.queues)} queues, "
        f"{entries} entries in {len(report.index_files)} index files"
    )
    verdict = "OK, no defect" if report.ok else f"FAILED, {report.defect_count} defects"
    out.append(f"summary: {verdict}; checked {counts}")
    print("\n".join(out))


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def _quarantine_row(q: QuarantineInfo) -> str:
    if q.kind != "corrupt":
        state = "torn tail cut"
    elif q.acknowledged is None:
        state = "corrupt, no health problem recorded"
    elif q.acknowledged:
        state = f"corrupt, acknowledged by {q.acknowledged_by}"
    else:
        state = "corrupt, NOT acknowledged"
    messages = f"; messages: {q.messages}" if q.messages else ""
    return (
        f"  {q.name}  phys {q.offset} .. {q.end}  {q.length} bytes  {q.segment}@{q.position}  "
        f"{state}; found by {q.found_by} {_ts(q.found_ms)}: {q.reason}{messages}"
    )


def _rows(rows: Any) -> list[str]:
    listed = list(rows)
    if len(listed) <= LIST_ROWS:
        return listed
    return [*listed[:LIST_ROWS], f"  ... and {len(listed) - LIST_ROWS} more (--json lists all)"]


def _ts(ms: int) -> str:
    if ms <= 0:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (OverflowError, OSError, ValueError):
        return str(ms)


# --- dump, query, view --------------------------------------------------------------------


def _cmd_dump(args: argparse.Namespace) -> int:
    records: list[dict[str, Any]] = []
    with _ReadOnlyStore(args) as store:
        offset, stop = args.offset, ""
        segments = store.commit_log.segments
        while len(records) < args.count:
            segment = segments.find(offset)
            if segment is None:
                stop = f"offset {offset} is outside the CommitLog ({segments.min_offset} .. {segments.max_offset})"
                break
            pos = offset - segment.base_offset
            result = check_record(segment.buffer, pos, segment.file_size, check_crc=False)
            if isinstance(result, Blank):
                offset = store.commit_log.roll_next_file(offset)
                continue
            if not isinstance(result, Valid):
                detail = getattr(result, "detail", "record runs past its segment")
                stop = f"no record at offset {offset}: {detail}"
                break
            message = decode_record(
                segment.buffer, pos, limit=segment.file_size, file=segment.path.name
            )
            records.append(message_dict(message, args.body_bytes))
            offset += result.size
    if args.json:
        print(
            json.dumps(
                {"records": records, "next_offset": offset, "stopped": stop or None}, indent=2
            )
        )
    else:
        _print_messages(records)
        if stop:
            print(f"mqcore dump: {stop}", file=sys.stderr)
    return EXIT_OK if records else EXIT_FOUND_NOTHING


def _cmd_query(args: argparse.Namespace) -> int:
    with _ReadOnlyStore(args) as store:
        found = queries.query_by_key(
            store.commit_log,
            store.index,
            args.topic,
            args.key,
            args.begin,
            args.end,
            args.max_count,
        )
        messages = [message_dict(m, args.body_bytes) for m in found]
    if args.json:
        print(json.dumps({"messages": messages}, indent=2))
    else:
        _print_messages(messages)
        if not messages:
            print(
                f"mqcore query: no message of topic {args.topic} with key {args.key}",
                file=sys.stderr,
            )
    return EXIT_OK if messages else EXIT_FOUND_NOTHING


def _cmd_view(args: argparse.Namespace) -> int:
    with _ReadOnlyStore(args) as store:
        topics = [args.topic] if args.topic else store.topics()
        found = queries.view_by_id(store.commit_log, store.index, topics, args.msg_id)
        message = message_dict(found, args.body_bytes) if found is not None else None
    if args.json:
        print(json.dumps({"message": message}, indent=2))
    elif message is not None:
        _print_messages([message])
    else:
        print(f"mqcore view: no message with id {args.msg_id}", file=sys.stderr)
    return EXIT_OK if message is not None else EXIT_FOUND_NOTHING


def message_dict(m: MessageExt, body_bytes: int = DEFAULT_BODY_BYTES) -> dict[str, Any]:
    """Every field of a decoded record, JSON-ready, with a body preview (text or hex)."""
    preview = m.body[:body_bytes]
    text = _printable(preview)
    return {
        "phys_offset": m.phys_offset,
        "offset_msg_id": m.offset_msg_id,
        "msg_id": m.msg_id,
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "store_size": m.store_size,
        "magic": "V2" if m.magic_code == MESSAGE_MAGIC_CODE_V2 else "V1",
        "body_crc": m.body_crc,
        "body_crc_ok": body_crc(m.body) == m.body_crc,
        "flag": m.flag,
        "sys_flag": m.sys_flag,
        "sys_flag_names": _sys_flag_names(m.sys_flag),
        "born_timestamp": m.born_timestamp,
        "born_host": str(m.born_host),
        "store_timestamp": m.store_timestamp,
        "store_host": str(m.store_host),
        "reconsume_times": m.reconsume_times,
        "prepared_transaction_offset": m.prepared_transaction_offset,
        "tags": m.tags,
        "keys": list(m.keys),
        "properties": dict(m.properties),
        "body_length": len(m.body),
        "body_encoding": "text" if text is not None else "hex",
        "body_preview": text if text is not None else preview.hex(),
        "body_truncated": len(m.body) > body_bytes,
    }


def _printable(data: bytes) -> str | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if all(c.isprintable() or c in "\n\r\t" for c in text) else None


def _sys_flag_names(sys_flag: int) -> list[str]:
    names = [name for bit, name in _SYS_FLAG_NAMES if sys_flag & bit]
    if sys_flag & 0xC:
        names.append(_TRANSACTION_NAMES[sys_flag & 0xC])
    if sys_flag & 0x700:
        names.append(f"COMPRESSION_TYPE_{(sys_flag & 0x700) >> 8}")
    return names


def _print_messages(messages: list[dict[str, Any]]) -> None:
    blocks = []
    for m in messages:
        crc = "ok" if m["body_crc_ok"] else "MISMATCH"
        flags = " ".join(m["sys_flag_names"]) or "-"
        props = ", ".join(f"{k}={v}" for k, v in sorted(m["properties"].items())) or "-"
        more = " ..." if m["body_truncated"] else ""
        blocks.append(
            "\n".join(
                (
                    f"phys_offset         {m['phys_offset']}",
                    f"offset_msg_id       {m['offset_msg_id']}",
                    f"msg_id              {m['msg_id']}",
                    f"topic               {m['topic']}",
                    f"queue               {m['queue_id']} @ offset {m['queue_offset']}",
                    f"store_size          {m['store_size']} bytes, magic {m['magic']}",
                    f"body_crc            {m['body_crc']} ({crc})",
                    f"flag                {m['flag']}",
                    f"sys_flag            {m['sys_flag']:#x} ({flags})",
                    f"born                {_ts(m['born_timestamp'])} ({m['born_timestamp']}) from {m['born_host']}",
                    f"stored              {_ts(m['store_timestamp'])} ({m['store_timestamp']}) at {m['store_host']}",
                    f"reconsume_times     {m['reconsume_times']}",
                    f"prepared_tx_offset  {m['prepared_transaction_offset']}",
                    f"tags                {m['tags'] or '-'}",
                    f"keys                {' '.join(m['keys']) or '-'}",
                    f"properties          {props}",
                    f"body                {m['body_length']} bytes, {m['body_encoding']}: "
                    f"{m['body_preview']!r}{more}",
                )
            )
        )
    if blocks:
        print("\n\n".join(blocks))
