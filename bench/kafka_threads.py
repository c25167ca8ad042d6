"""The Cairn process's CPU time by thread, for ``bench/kafka.py`` (moved out of it to keep it
under the module size cap): the ``--serve`` process writes its threads' CPU times on SIGUSR2,
the driver reads them after each workload and reports them with each thread's role."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path


def thread_cpu_path(root: str | Path) -> Path:
    """Where the ``--serve`` process writes its threads' CPU times on SIGUSR2."""
    return Path(f"{root}.threads.json")


def write_thread_cpu(path: Path) -> None:
    """``{thread name: CPU seconds}`` of every live thread of this process, to ``path``
    (written whole, then renamed: the driver never reads half a file)."""
    cpu: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            clock = time.pthread_getcpuclockid(thread.ident)
            cpu[thread.name] = time.clock_gettime(clock)
        except OSError:  # ended meanwhile
            continue
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(cpu))
    os.replace(tmp, path)


def read_thread_cpu(proc: subprocess.Popen[bytes], path: Path) -> dict[str, float]:
    """Ask the ``--serve`` process for its threads' CPU times (SIGUSR2) and read them,
    grouped by thread name without its pool number (``asyncio_3`` -> ``asyncio``)."""
    path.unlink(missing_ok=True)
    proc.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 10
    while not path.exists():
        if time.monotonic() > deadline:
            return {}
        time.sleep(0.01)
    grouped: dict[str, float] = {}
    for name, seconds in json.loads(path.read_text()).items():
        key = re.sub(r"_\d+$", "", name)
        grouped[key] = grouped.get(key, 0.0) + seconds
    return grouped


# What each thread of the Cairn process does during the workloads.
THREAD_ROLES = {
    "MainThread": "asyncio loop: socket, frames, request decode, responses",
    "asyncio": "to_thread workers: Produce batch decode + Broker.send; Fetch reads",
    "cairn-reput": "reput: ConsumeQueue + index dispatch",
    "kafka-read-ahead": "Fetch read-ahead: the next store-path batch",
    "cairn-prefault": "CommitLog pre-faulting",
    "cairn-flush": "flush: msync of the CommitLog, ConsumeQueues, checkpoint",
    "cairn-index": "index service",
    "cairn-cleanup": "file cleanup",
}
