"""``cairn.malloc_policy``: with the broker's thresholds, a freed multi-megabyte buffer is
reused without new page faults; with glibc's defaults a burst of them is given back to the
system when freed and faults its pages in again the next time."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import resource, sys
from cairn.malloc_policy import keep_large_buffers
if sys.argv[1] == "policy":
    assert keep_large_buffers()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def burst():  # a produce's or a fetch's buffers, alive together, then all freed
    bufs = [bytes([i]) * (4 << 20) for i in range(3)]
    del bufs
for _ in range(3):
    burst()  # warm up: the heap grows once
before = faults()
for _ in range(20):
    burst()
print((faults() - before) / 20)
"""


def _faults_per_burst(mode: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return float(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_large_buffers_are_reused_without_page_faults() -> None:
    pages = 3 * (4 << 20) // 4096
    # glibc's defaults: the freed heap top (12 MiB, above twice the 4 MiB threshold the
    # first free set) is trimmed, and the next burst faults its pages in again.
    assert _faults_per_burst("default") > pages / 3
    assert _faults_per_burst("policy") < pages / 50
