"""Session-wide fixtures: a private Redis server, free ports, subprocess helpers."""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# SCRAM credentials are derived whenever a test makes a user or a token: the fewest
# iterations RFC 7677 allows keeps that fast (brokers started by tests inherit it).
os.environ.setdefault("CAIRN_SCRAM_ITERATIONS", "4096")

from tests.support.redis_server import free_port, private_redis, wait_for_port

REPO = Path(__file__).resolve().parent.parent
__all__ = ["REPO", "free_port", "wait_for_port"]


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis only this test session uses (or ``CAIRN_TEST_REDIS_URL`` when set).

    ``make test`` installs Debian's redis-server when the binary is missing.
    """
    configured = os.environ.get("CAIRN_TEST_REDIS_URL", "").strip()
    if configured:
        yield configured
        return
    if shutil.which("redis-server") is None:
        pytest.fail(
            "redis-server is not installed; `make test` installs it (apt-get install redis-server)"
        )
    with private_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one local SparkSession of the test run (2 cores, UI off), shared by every
    ``spark`` test (starting one takes ~10 s)."""
    from pipeline.session import get_session, stop_session

    with warnings.catch_warnings():
        # Py4J and PySpark start-up emit ResourceWarnings about sockets they keep on purpose.
        warnings.simplefilter("ignore", ResourceWarning)
        session = get_session(
            "local[2]", app_name="cairn-tests", conf={"spark.ui.enabled": "false"}
        )
    yield session
    stop_session()


@pytest.fixture(scope="session", autouse=True)
def _fast_scram() -> None:
    """The settings were read before this module set CAIRN_SCRAM_ITERATIONS: say it there."""
    from django.conf import settings

    settings.CAIRN_ACCOUNTS["SCRAM_ITERATIONS"] = int(os.environ["CAIRN_SCRAM_ITERATIONS"])


@pytest.fixture(autouse=True)
def _fresh_acl_cache() -> Iterator[None]:
    """Each test's database starts with no ACL entries: forget the authorizer cached by the
    previous test (its version numbers start again too)."""
    from accounts.acls import cache

    cache.forget()
    yield
    cache.forget()
