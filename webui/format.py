"""How the console shows bodies, sizes and times (pure functions; templates and frames use them)."""

from __future__ import annotations

import datetime as dt
import json
import string
from typing import Any

PREVIEW_CHARS = 160
HEX_MAX_BYTES = 64 * 1024
TEXT_MAX_BYTES = 1024 * 1024
_PRINTABLE = set(string.printable) - {"\x0b", "\x0c"}


def decode_text(body: bytes) -> str | None:
    """The body as text when it is valid UTF-8, else None."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def body_preview(body: bytes, chars: int = PREVIEW_CHARS) -> tuple[str, str]:
    """A short one-line preview and its encoding: ``text`` or ``hex`` (binary bodies)."""
    head = body[: chars * 4]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        cut_character = len(body) > len(head) and exc.start >= len(head) - 3
        if not cut_character:
            return body[: chars // 2].hex(" "), "hex"
        text = head[: exc.start].decode("utf-8")
    flat = " ".join(text.split())
    return (flat[:chars] + "…" if len(flat) > chars else flat), "text"


def pretty_json(body: bytes) -> str | None:
    """The body re-indented when it is a JSON document, else None."""
    text = decode_text(body)
    if text is None or not text.strip() or text.lstrip()[0] not in '[{"0123456789-tfn':
        return None
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=False)
    except ValueError:
        return None


def hex_dump(body: bytes, limit: int = HEX_MAX_BYTES) -> str:
    """``offset  hex bytes  |ascii|`` lines, 16 bytes each (first ``limit`` bytes)."""
    lines = []
    for at in range(0, min(len(body), limit), 16):
        chunk = body[at : at + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {hexes:<47}  |{ascii_}|")
    if len(body) > limit:
        lines.append(f"… {len(body) - limit} more bytes (download the body to see them)")
    return "\n".join(lines)


def body_views(body: bytes) -> dict[str, Any]:
    """Everything the detail page shows of a body."""
    text = decode_text(body[:TEXT_MAX_BYTES]) if len(body) <= TEXT_MAX_BYTES else None
    return {
        "size": len(body),
        "text": text,
        "is_text": text is not None,
        "json": pretty_json(body) if text is not None else None,
        "hex": hex_dump(body),
        "truncated_hex": len(body) > HEX_MAX_BYTES,
        "too_large_for_text": len(body) > TEXT_MAX_BYTES,
    }


def human_bytes(value: int | float | None) -> str:
    if value is None:
        return "–"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} PiB"


def human_duration_ms(value: int | None) -> str:
    """``950 ms``, ``12.4 s``, ``3 min 20 s``, ``2 h 5 min``, ``3 d 4 h``."""
    if value is None:
        return "–"
    ms = int(value)
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def iso_utc(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


def utc_text(ms: int) -> str:
    """``2026-01-05 10:00:00.123 UTC``: what a time reads as before the browser localises it."""
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d} UTC"


def perm_text(perm: int) -> str:
    """``RW``, ``R-``, ``-W``, ``--`` (plus ``I`` for inherit)."""
    text = ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-")
    return text + ("I" if perm & 1 else "")


def parse_pairs(text: str) -> dict[str, str]:
    """``name=value`` lines (blank lines and ``#`` comments skipped) as a dict.

    Raises:
        ValueError: a line without ``=`` or with an empty name (the message says which line).
    """
    pairs: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"line {number}: expected name=value")
        pairs[name.strip()] = value.strip()
    return pairs


def format_pairs(pairs: dict[str, str]) -> str:
    return "\n".join(f"{k}={v}" for k, v in sorted(pairs.items()))
