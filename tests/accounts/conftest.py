"""Accounts test fixtures: the fewest SCRAM iterations RFC 7677 allows, fast password hashes."""

from __future__ import annotations

from typing import Any

import pytest

from mqcore.access.authorizer import Subject


@pytest.fixture(autouse=True)
def fast_secrets(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.CAIRN_ACCOUNTS = {**settings.CAIRN_ACCOUNTS, "SCRAM_ITERATIONS": 4096}


@pytest.fixture
def actor() -> Subject:
    return Subject("root", "admin", "10.0.0.9", "rest")
