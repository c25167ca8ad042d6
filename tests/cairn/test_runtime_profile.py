"""``make run`` installs only the runtime profile: the broker must start and serve without any
package that only the test suite, the benchmarks or Spark bring (``.[dev]`` in pyproject).

The dev environment the tests run in has those packages, so the broker runs here with an
import hook that makes each of them unimportable, as on a machine that never installed them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import tomllib
import urllib.request
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from tests.conftest import REPO, free_port, wait_for_port
from tests.support.manage import ApiClient, broker_env, start_runbroker

pytestmark = pytest.mark.slow

BLOCKER = """\
import sys

BLOCKED = {blocked!r}


class DevOnly:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is a dev-only package (not in the runtime profile)")
        return None


sys.meta_path.insert(0, DevOnly())
"""


def distribution(requirement: str) -> str:
    """``"moto[server]>=5.0"`` -> ``"moto"``, normalised as PEP 503 does."""
    name = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def dev_only_imports() -> set[str]:
    """The import names of every distribution in ``.[dev]`` and not in the runtime list."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = {distribution(r) for r in project["dependencies"]}
    dev_only = {distribution(r) for r in project["optional-dependencies"]["dev"]} - runtime
    return {
        module
        for module, dists in packages_distributions().items()
        if any(distribution(d) in dev_only for d in dists)
    }


def test_the_dev_only_list_names_the_test_tools() -> None:
    # The hook below is only as good as this list: it must hold what pyproject says is dev-only.
    blocked = dev_only_imports()
    assert {"pytest", "pyspark", "playwright", "confluent_kafka", "aiokafka", "moto"} <= blocked
    assert not blocked & {"django", "numpy", "channels", "rest_framework", "celery"}


def test_the_broker_serves_without_dev_only_packages(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(BLOCKER.format(blocked=sorted(dev_only_imports())))
    probe = subprocess.run(
        [sys.executable, "-c", "import pyspark"],
        env={"PYTHONPATH": str(hook)},
        capture_output=True,
        text=True,
    )
    assert "dev-only package" in probe.stderr  # the hook really blocks

    http, kafka = free_port(), free_port()
    env = broker_env(tmp_path / "data", http, kafka, PYTHONPATH=str(hook))
    token_run = subprocess.run(
        [sys.executable, "manage.py", "createtoken", "probe", "--role", "operator"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert token_run.returncode == 0, token_run.stderr
    token = token_run.stdout.strip().splitlines()[-1]
    proc = start_runbroker(env)
    try:
        wait_for_port(http, 60, proc)
        wait_for_port(kafka, 60, proc)
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=10) as r:
            assert json.load(r)["status"] == "ok"
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/login/", timeout=10) as r:
            assert r.status == 200
        api = ApiClient(f"http://127.0.0.1:{http}", token)
        api.call("POST", "/topics", {"name": "cold"})
        batch = {"messages": [{"body": "hello", "keys": ["k1"]}]}
        sent = api.call("POST", "/topics/cold/messages", batch)["results"]
        assert [r["status"] for r in sent] == ["SEND_OK"]
        # The index is written by reput, just after the send is acknowledged.
        deadline = time.monotonic() + 20
        while not (found := api.get("/topics/cold/messages", key="k1", begin=0)["messages"]):
            assert time.monotonic() < deadline, "the key never became searchable"
            time.sleep(0.1)
        assert [m["body"] for m in found] == ["hello"]
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    text = out.decode()
    assert proc.returncode == 0, text
    assert "dev-only package" not in text and "Traceback" not in text
