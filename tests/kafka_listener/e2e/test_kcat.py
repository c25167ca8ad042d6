"""Debian's kcat 1.7.1 (librdkafka 2.0.2, ``tools/system-deps.sh``) against the listener.

That librdkafka compresses only when the broker advertises Produce v0 (KAFKA-18659), so
these tests fail if ApiVersions stops doing so: each batch must reach the store compressed
(the produced batch kept for fetches has the codec in its attributes) and read back
identical (issue 21).
"""

from __future__ import annotations

import shutil
import subprocess
import warnings
from collections.abc import Callable

import pytest

from ..harness import RunningListener

with warnings.catch_warnings():  # kafka-python 3.0 loads its schemas with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

pytestmark = pytest.mark.e2e

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # Kafka's attribute bits


@pytest.fixture(scope="module")
def kcat() -> str:
    found = shutil.which("kcat")
    if found is None:
        pytest.fail("kcat is not installed: run tools/system-deps.sh (tools/test.sh does)")
    return found


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_kcat_batches_arrive_compressed_and_read_back(
    kcat: str, running: RunningListener, names: Callable[[str], str], codec: str
) -> None:
    topic = names(f"kcat-{codec}")
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    lines = [f"{codec} record {i} " + "abc" * (i % 40) for i in range(200)]
    produced = subprocess.run(
        [kcat, "-P", "-b", running.bootstrap, "-t", topic, "-p", "0", "-z", codec,
         "-X", "linger.ms=50", "-d", "msg"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr[-2000:]
    assert "not compressing batch" not in produced.stderr
    assert running.listener is not None
    cached = running.listener.ctx.batch_cache.run(topic.replace(".", "|"), 0, 0, 1 << 30, 10**6)
    assert sum(entry.end - entry.base for entry, _ in cached) == len(lines)
    attributes = {int.from_bytes(entry.data[21:23], "big") & 0x07 for entry, _ in cached}
    assert attributes == {CODECS[codec]}
    assert {entry.compression for entry, _ in cached} == {CODECS[codec]}
    consumed = subprocess.run(
        [kcat, "-C", "-b", running.bootstrap, "-t", topic, "-p", "0", "-o", "beginning",
         "-e", "-f", "%s\\n"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr[-2000:]
    assert consumed.stdout.splitlines() == lines
