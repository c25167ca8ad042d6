"""First start from a fresh checkout: ``make run`` until ``/healthz`` answers.

    .venv/bin/python bench/cold_start.py            # runtime profile, then dev as the peer
    .venv/bin/python bench/cold_start.py --only runtime

Each profile gets a fresh ``git clone`` of this repository's HEAD in a temp dir (so a new
``.venv``, no database, no store) and pip's cache turned off, as on a new machine:

- ``runtime``: what ``make run`` does (``tools/bootstrap.sh runtime``: the broker's packages
  only), then ``manage.py runbroker``;
- ``dev``: the environment ``make test`` builds (``tools/bootstrap.sh dev``: the Kafka
  clients, PySpark, Playwright, moto ...), then the same start. Before the profiles were split
  this was what ``make run`` cost, so it is the peer the runtime figure is read against.

It prints the seconds to the first ``/healthz`` answer, the environment's size and package
count, and the runtime/dev ratio (ratios hold on a loaded machine; the seconds do not).
Nothing is left behind.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Start:
    profile: str
    seconds: float
    venv_mib: float
    packages: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return bool(json.load(r).get("status"))
    except OSError:
        return False


def tree_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def cold_start(profile: str, timeout: float) -> Start:
    with tempfile.TemporaryDirectory(prefix="cairn-cold-") as tmp:
        checkout = Path(tmp) / "cairn"
        subprocess.run(["git", "clone", "-q", str(REPO), str(checkout)], check=True)
        port = free_port()
        env = dict(
            os.environ,
            PIP_NO_CACHE_DIR="1",
            CAIRN_DATA_DIR=str(Path(tmp) / "var"),
            CAIRN_HTTP_PORT=str(port),
            CAIRN_KAFKA_PORT=str(free_port()),
        )
        for shared in ("CAIRN_STORE_DIR", "CAIRN_REDIS_URL", "CAIRN_SERVICES", "DATABASE_URL"):
            env.pop(shared, None)
        command = (
            "make run"
            if profile == "runtime"
            else "tools/bootstrap.sh dev && exec .venv/bin/python manage.py runbroker"
        )
        began = time.perf_counter()
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=checkout,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            while not healthy(port):
                if proc.poll() is not None:
                    sys.exit(f"cold_start: the {profile} start exited with {proc.returncode}")
                if time.perf_counter() - began > timeout:
                    sys.exit(f"cold_start: the {profile} start did not answer in {timeout:.0f} s")
                time.sleep(0.25)
            seconds = time.perf_counter() - began
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        listed = subprocess.run(
            [str(checkout / ".venv/bin/python"), "-m", "pip", "list", "--format=json"],
            capture_output=True,
            text=True,
            check=True,
        )
        packages = len(json.loads(listed.stdout))
        size = tree_mib(checkout / ".venv")
        shutil.rmtree(checkout / ".venv")
        return Start(profile, seconds, size, packages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["runtime", "dev"], help="measure one profile")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per start")
    args = parser.parse_args()
    profiles = [args.only] if args.only else ["runtime", "dev"]
    results = [cold_start(p, args.timeout) for p in profiles]
    print(f"{'profile':<8} {'to /healthz':>12} {'.venv':>9} {'packages':>9}")
    for r in results:
        print(f"{r.profile:<8} {r.seconds:>10.1f} s {r.venv_mib:>6.0f} MiB {r.packages:>9}")
    if len(results) == 2:
        print(f"runtime/dev: {results[0].seconds / results[1].seconds:.2f} of the time")


if __name__ == "__main__":
    main()
