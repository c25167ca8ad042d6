"""Config documents uploaded to the console and previewed, waiting for the user's confirmation.

The console shows an upload's diff first and applies it only when the user confirms
(:mod:`webui.views.config`). The document stays here between the two requests rather than in
a hidden form field: a document may be 16 MiB, far above what Django accepts as a form field,
and the user should not have to choose the file again. The console runs in the broker's one
process, so memory is the place; entries are the uploader's alone, expire after 30 minutes,
and at most :data:`MAX_ENTRIES` (:data:`MAX_BYTES` in all) are kept, oldest dropped first.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

MAX_ENTRIES = 8
MAX_BYTES = 64 * 1024 * 1024
TTL_S = 30 * 60


@dataclass(frozen=True, slots=True)
class Pending:
    user_id: int
    document: str
    text: str
    #: what the confirmed diff added, removed and changed (:func:`diff_key`): applying checks
    #: the table still differs in just those entries (offsets move while consumers commit)
    base: str
    created: float


_lock = threading.Lock()
_entries: dict[str, Pending] = {}


def put(user_id: int, document: str, text: str, base: str) -> str:
    """Keep an upload; returns the token its confirmation form carries."""
    token = secrets.token_urlsafe(18)
    now = time.monotonic()
    with _lock:
        for key in [k for k, p in _entries.items() if now - p.created > TTL_S]:
            del _entries[key]
        _entries[token] = Pending(user_id, document, text, base, now)
        while len(_entries) > MAX_ENTRIES or _size() > MAX_BYTES:
            del _entries[next(iter(_entries))]
    return token


def get(token: str, user_id: int) -> Pending | None:
    """The upload ``token`` names, if it is this user's and has not expired."""
    with _lock:
        found = _entries.get(token)
    if found is None or found.user_id != user_id:
        return None
    if time.monotonic() - found.created > TTL_S:
        return None
    return found


def drop(token: str) -> None:
    with _lock:
        _entries.pop(token, None)


def _size() -> int:
    return sum(len(p.text) for p in _entries.values())


def diff_key(diff: dict[str, Any]) -> str:
    """The names a config diff adds, removes and changes, as one comparable string."""
    return json.dumps([diff["added"], diff["removed"], [c["name"] for c in diff["changed"]]])
