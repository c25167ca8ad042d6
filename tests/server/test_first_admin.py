"""The first start's admin: its password in a mode-600 file, the console URL (https with TLS)
printed instead; an existing superuser means nothing is made."""

from __future__ import annotations

import io
import stat
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from server.management.commands.runbroker import FIRST_PASSWORD_FILE, Command

pytestmark = pytest.mark.django_db


def test_the_password_goes_to_a_private_file_and_the_https_url_is_printed(
    tmp_path: Path, settings: Any
) -> None:
    settings.DATA_DIR = tmp_path
    (tmp_path / FIRST_PASSWORD_FILE).write_text("stale\n")  # from an earlier database
    out = io.StringIO()
    Command(stdout=out)._ensure_admin("https", "::1", 8443)
    text = out.getvalue()
    secret = tmp_path / FIRST_PASSWORD_FILE
    password = secret.read_text().strip()
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert password != "stale" and password not in text
    assert "log in at https://[::1]:8443/login/" in text
    assert get_user_model().objects.get(username="admin").check_password(password)
    again = io.StringIO()
    Command(stdout=again)._ensure_admin("https", "::1", 8443)
    assert again.getvalue() == "" and secret.read_text().strip() == password
