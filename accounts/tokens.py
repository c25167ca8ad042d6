"""API token texts and their digests.

A token is 32 random bytes, URL-safe base64 (43 characters): shown once when issued, then kept
only as its SHA-256. With 256 bits of entropy a plain, fast hash is safe (there is nothing to
guess), and authenticating a request stays one indexed lookup of the digest.
"""

from __future__ import annotations

import hashlib
import secrets

TOKEN_BYTES = 32
#: Longest text that can be a token (anything longer is refused before hashing).
MAX_TOKEN_LENGTH = 64


def new_token_text() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def digest(text: str) -> str:
    """The SHA-256 hex digest a token is stored as."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
