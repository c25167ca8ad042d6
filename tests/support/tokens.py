"""API tokens for tests: a hashed token row made directly (no audit entry, no SCRAM keys;
tests of those use ``accounts.service.issue_token``)."""

from __future__ import annotations

from typing import Any

from accounts.models import ApiToken
from accounts.tokens import digest, new_token_text


def make_token(user: Any, name: str = "test") -> str:
    """A new token of ``user``; returns its text."""
    text = new_token_text()
    ApiToken.objects.create(user=user, name=name, digest=digest(text))
    return text
