"""The Celery app works against a real worker process over the session's private Redis."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def test_real_worker_answers_ping(redis_url: str) -> None:
    env = dict(os.environ, CAIRN_REDIS_URL=redis_url)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "workers",
            "worker",
            "--pool=solo",
            "--loglevel=WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        code = "from workers.app import app\nprint(app.send_task('cairn.ping').get(timeout=60))\n"
        result = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "pong"
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
