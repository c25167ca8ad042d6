"""RocketMQ's config files as they really are: fastjson's text, written so that a crash loses nothing.

RocketMQ writes every file in ``{root}/config/`` with fastjson 1.2.83
``JSON.toJSONString(obj, prettyFormat=true)`` (spec 8.1). That text is almost JSON:

* **Bare integer map keys.** A ``Map<Integer, Long>`` is written ``{0:250,1:251}``, which no
  standard parser accepts (``consumerOffset.json``, ``delayOffset.json``).
* **Where the newlines go.** One TAB per nesting level and ``"key":value`` with no space. A
  string key gets a newline and indentation before it; a *non-string* key does not, so an
  int-keyed map sits on the line of its ``{`` and only its ``}`` gets a line of its own. This is
  what a real broker writes (→ is one TAB)::

      {
      →"dataVersion":{
      →→"counter":3,
      →→"stateVersion":0,
      →→"timestamp":1700000000000
      →},
      →"offsetTable":{
      →→"TopicTest@group_a":{0:250,1:251
      →→}
      →}
      }

* **Beans** (Java objects with getters) come out with their properties sorted by name, nulls
  left out. Maps keep their iteration order and also leave out null values.
* Empty maps and lists are ``{}`` and ``[]``. Java ``Set`` (fastjson ``CollectionCodec``) and
  primitive arrays (``long[]``) are written inline, ``["a","b"]``, with no newlines.
* Strings are UTF-8 and never ``\\uXXXX``-escaped above ASCII; control characters are escaped.
  The file has no trailing newline.

Data model of :func:`dumps_fastjson` (the writer declares the Java shape by the Python type):

===============================  =============================  ==================================
Python value                     Java it stands for             written as
===============================  =============================  ==================================
:class:`Bean`                    a bean                         keys sorted, ``None`` left out
``dict`` with ``str`` keys       ``Map<String, V>``             insertion order, ``None`` left out
``dict`` with ``int`` keys       ``Map<Integer|Long, V>``       bare keys, on the ``{`` line
``list``                         ``java.util.List``             one item per line
``tuple``, ``set``, ``frozenset``  ``Set`` or a primitive array   inline ``[a,b]`` (sets sorted)
``str``, ``int``, ``bool``       String, int/long, boolean      as JSON
===============================  =============================  ==================================

:func:`loads_fastjson` reads both fastjson's text and standard JSON. A bare integer key comes
back as a Python ``int``; a quoted key stays a ``str`` (callers that expect numbers convert).

Crash behaviour (:func:`atomic_write`), for a file ``X``:

1. :func:`write_temp`: write ``X.tmp`` and fsync it. ``X`` and ``X.bak`` are untouched.
2. :func:`backup_current`: hard-link ``X`` to ``X.bak.tmp`` (a copy where links fail) and rename
   it over ``X.bak``, so ``X.bak`` holds exactly what ``X`` holds.
3. :func:`install_temp`: rename ``X.tmp`` over ``X``. The rename is atomic: ``X`` is the old
   file or the new one, never a mixture.
4. :func:`sync_dir`: fsync the directory so the renames survive power loss.

A crash before step 3 leaves the old ``X``; after it, the new one; ``X.bak`` is always a
complete earlier version. :func:`load_with_backup` also reads what RocketMQ's own writers leave
behind when *they* crash (HEAD renames ``X`` to ``X.bak`` and then writes ``X`` in place, so ``X``
may be missing, empty or cut short): any of those falls back to ``X.bak``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from typing import Any, overload

from mqcore.errors import StoreError, ValidationError

log = logging.getLogger(__name__)

StrPath = str | os.PathLike[str]

TEMP_SUFFIX = ".tmp"
BACKUP_SUFFIX = ".bak"
CORRUPT_SUFFIX = ".corrupt"


class Bean(dict[str, Any]):
    """A Java bean: fastjson writes its properties sorted by name and leaves out ``None``."""

    __slots__ = ()


# ---------------------------------------------------------------------------------------------
# Writing fastjson's pretty format

_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group(0)
    return _SHORT_ESCAPES.get(ch) or f"\\u{ord(ch):04X}"


def _quote(text: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, text) + '"'


def dumps_fastjson(obj: Any) -> str:
    """Encode ``obj`` exactly as fastjson's pretty format would (see the module docstring).

    Args:
        obj: a tree of :class:`Bean`, ``dict``, ``list``, ``tuple``/``set``, ``str``, ``int``,
            ``bool`` and ``None``.

    Returns:
        The text, without a trailing newline.

    Raises:
        TypeError: a value or a map key has a type outside the data model (floats included:
            no RocketMQ config file holds one).
    """
    out: list[str] = []
    _emit(obj, 0, out)
    return "".join(out)


def _emit(value: Any, level: int, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, str):
        out.append(_quote(value))
    elif isinstance(value, Bean):
        _emit_bean(value, level, out)
    elif isinstance(value, dict):
        _emit_map(value, level, out)
    elif isinstance(value, list):
        _emit_list(value, level, out)
    elif isinstance(value, tuple | set | frozenset):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        out.append("[")
        for i, item in enumerate(items):
            if i:
                out.append(",")
            _emit(item, level, out)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(value).__name__} as fastjson: {value!r}")


def _emit_bean(bean: Bean, level: int, out: list[str]) -> None:
    # JavaBeanSerializer: '{', indent+1, newline; ',' + newline between properties;
    # indent-1, newline, '}'. A bean whose properties are all null still gets both newlines.
    inner = "\n" + "\t" * (level + 1)
    out.append("{" + inner)
    first = True
    for key in sorted(bean):
        child = bean[key]
        if child is None:
            continue
        if not first:
            out.append("," + inner)
        first = False
        out.append(_quote(key) + ":")
        _emit(child, level + 1, out)
    out.append("\n" + "\t" * level + "}")


def _emit_map(mapping: dict[Any, Any], level: int, out: list[str]) -> None:
    # MapSerializer: a newline precedes only *string* keys; the closing newline is written
    # whenever the map is non-empty (fastjson tests map.size(), so null values count).
    inner = "\n" + "\t" * (level + 1)
    out.append("{")
    first = True
    for key, child in mapping.items():
        if child is None:
            continue
        if not first:
            out.append(",")
        first = False
        if isinstance(key, str):
            out.append(inner + _quote(key) + ":")
        elif isinstance(key, int) and not isinstance(key, bool):
            out.append(f"{key}:")
        else:
            raise TypeError(f"map keys must be str or int, not {type(key).__name__}: {key!r}")
        _emit(child, level + 1, out)
    if mapping:
        out.append("\n" + "\t" * level)
    out.append("}")


def _emit_list(items: list[Any], level: int, out: list[str]) -> None:
    # ListSerializer (1.2.83): every item on its own line, even a single one.
    if not items:
        out.append("[]")
        return
    inner = "\n" + "\t" * (level + 1)
    out.append("[")
    for i, item in enumerate(items):
        out.append(("," if i else "") + inner)
        _emit(item, level + 1, out)
    out.append("\n" + "\t" * level + "]")


# ---------------------------------------------------------------------------------------------
# Reading

# One pass over the text: a string literal is matched whole (and kept as it is), so a bare key
# is recognised only outside strings, even in an expression like "a,1:b".
_STRING_OR_BARE_KEY = re.compile(
    r'"[^"\\]*(?:\\.[^"\\]*)*"'  # a string literal, escapes included
    r"|([{,])(\s*)(-?\d+)(\s*):",  # '{' or ',' then an unquoted integer and ':'
    re.DOTALL,
)
# A bare key is rewritten to a quoted key starting with NUL, which no real key contains
# (topic and group names are [%|a-zA-Z0-9_-]); the object hook turns it back into an int.
_BARE_MARK = "\x00"


def _quote_bare_key(match: re.Match[str]) -> str:
    if match.group(1) is None:
        return match.group(0)
    opener, before, digits, after = match.group(1, 2, 3, 4)
    return f'{opener}{before}"\\u0000{digits}"{after}:'


def _object_hook(pairs: list[tuple[str, Any]]) -> dict[Any, Any]:
    obj: dict[Any, Any] = {}
    for key, value in pairs:
        if key.startswith(_BARE_MARK):
            obj[int(key[1:])] = value
        else:
            obj[key] = value
    return obj


def loads_fastjson(text: str) -> Any:
    """Parse fastjson's text (bare integer keys, literal TABs in strings) or standard JSON.

    Returns:
        Plain ``dict``/``list``/``str``/``int``/``bool``/``None``; bare integer keys become
        ``int`` keys.

    Raises:
        ValueError: the text is not JSON even after the bare keys are quoted
            (``json.JSONDecodeError`` is a ``ValueError``).
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    return json.loads(
        _STRING_OR_BARE_KEY.sub(_quote_bare_key, text),
        strict=False,  # fastjson writes TAB characters inside strings unescaped
        object_pairs_hook=_object_hook,
    )


def parse_document(text: str) -> Any:
    """:func:`loads_fastjson` for documents handed in by a user (imports).

    Raises:
        ValidationError: field ``document``, rule ``json``, when the text does not parse.
    """
    try:
        return loads_fastjson(text)
    except ValueError as exc:
        raise ValidationError("document", "json", f"the document is not valid JSON: {exc}") from exc


# ---------------------------------------------------------------------------------------------
# Crash-safe writing, one function per step so tests can stop between any two of them


def temp_path(path: StrPath) -> str:
    return os.fspath(path) + TEMP_SUFFIX


def backup_path(path: StrPath) -> str:
    return os.fspath(path) + BACKUP_SUFFIX


def write_temp(path: StrPath, data: bytes) -> str:
    """Step 1: write ``data`` to ``X.tmp`` (creating the directory) and fsync it.

    Returns:
        The temporary file's path.
    """
    tmp = temp_path(path)
    os.makedirs(os.path.dirname(os.path.abspath(tmp)), exist_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


def backup_current(path: StrPath) -> bool:
    """Step 2: make ``X.bak`` hold what ``X`` holds now, replacing it atomically.

    An empty ``X`` is not backed up: it would replace a good backup with nothing.

    Returns:
        True if a backup was made, False if ``X`` does not exist or is empty.
    """
    src = os.fspath(path)
    bak = backup_path(src)
    staging = bak + TEMP_SUFFIX
    try:
        if os.stat(src).st_size == 0:
            return False
    except FileNotFoundError:
        return False
    _remove_if_present(staging)
    try:
        os.link(src, staging)
    except FileNotFoundError:
        return False
    except OSError:  # no hard links on this file system: copy instead
        try:
            with open(src, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return False
        write_temp(bak, data)  # writes and fsyncs bak + ".tmp", i.e. staging
    os.replace(staging, bak)
    return True


def install_temp(path: StrPath) -> None:
    """Step 3: rename ``X.tmp`` over ``X`` (atomic)."""
    os.replace(temp_path(path), os.fspath(path))


def sync_dir(path: StrPath) -> None:
    """Step 4: fsync the directory holding ``path`` so the renames are durable."""
    directory = os.path.dirname(os.path.abspath(os.fspath(path)))
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # platforms that cannot open directories; nothing more to do there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: StrPath, text: str) -> None:
    """Replace file ``X`` with ``text`` so that no crash can lose both versions.

    Runs :func:`write_temp`, :func:`backup_current`, :func:`install_temp`, :func:`sync_dir`.
    Not thread-safe for the same path (it uses fixed ``X.tmp``/``X.bak.tmp`` names): callers
    serialise their writes, and the store lock keeps other processes out.

    Raises:
        OSError: the disk refused; ``X`` is then unchanged.
    """
    write_temp(path, text.encode("utf-8"))
    backup_current(path)
    install_temp(path)
    sync_dir(path)


def _remove_if_present(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


# ---------------------------------------------------------------------------------------------
# Loading with fallback to X.bak

_MISSING = "missing"
_EMPTY = "empty"


def _read(path: str, decode: Callable[[Any], Any]) -> tuple[str | None, Any]:
    """Read and decode one file. Returns ``(None, value)`` or ``(reason, None)``."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return _MISSING, None
    try:
        text = raw.decode("utf-8")
        if not text.strip():
            return _EMPTY, None
        return None, decode(loads_fastjson(text))
    except (ValueError, ValidationError) as exc:
        return f"unreadable ({exc})", None


def _identity(value: Any) -> Any:
    return value


@overload
def load_with_backup(path: StrPath) -> Any | None: ...


@overload
def load_with_backup[T](path: StrPath, decode: Callable[[Any], T]) -> T | None: ...


def load_with_backup(path: StrPath, decode: Callable[[Any], Any] | None = None) -> Any:
    """Load ``X``, falling back to ``X.bak`` when ``X`` is missing, empty or unreadable.

    RocketMQ's ``ConfigManager.load`` rules: a missing ``X`` with no ``X.bak`` is a fresh start;
    a bad ``X`` is set aside (renamed ``X.corrupt``, where RocketMQ deletes it, so that the next
    write cannot turn it into the backup) and ``X.bak`` is loaded; a missing or empty ``X.bak``
    then counts as empty state. Every fallback is logged as a warning with its reason.

    Args:
        path: the file ``X``.
        decode: turns the parsed JSON into the caller's state; it raises
            :class:`ValidationError` (or ``ValueError``) when the content is wrong, which counts
            as unreadable.

    Returns:
        The decoded content, or None for empty state.

    Raises:
        StoreError: both ``X`` and ``X.bak`` exist and neither can be read. Nothing is moved,
            so an operator can look at both.
    """
    main = os.fspath(path)
    bak = backup_path(main)
    decoder = decode or _identity
    reason, value = _read(main, decoder)
    if reason is None:
        return value
    bak_reason, bak_value = _read(bak, decoder)
    if reason == _MISSING and bak_reason == _MISSING:
        return None
    if bak_reason not in (None, _MISSING, _EMPTY):
        raise StoreError(f"cannot load {main}: it is {reason}, and {bak} is {bak_reason}")
    if reason == _EMPTY:
        _remove_if_present(main)
    elif reason != _MISSING:
        os.replace(main, main + CORRUPT_SUFFIX)
        log.warning("%s was %s; moved it to %s", main, reason, main + CORRUPT_SUFFIX)
    if bak_reason is None:
        log.warning("%s is %s; loaded the backup %s instead", main, reason, bak)
        return bak_value
    log.warning("%s is %s and its backup %s is %s; starting empty", main, reason, bak, bak_reason)
    return None
