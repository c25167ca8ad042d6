"""The S3 backend beyond the shared contract (test_backend.py): its object layout, chunks,
composing on seal, what crashes leave behind, and its errors. Against a real S3 API server
(moto's standalone server, started by conftest), through boto3 as in production."""

from __future__ import annotations

import hashlib
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore.tiered import (
    SegmentId,
    SegmentMissingError,
    SegmentPositionError,
    SegmentType,
    TieredStoreError,
)
from mqcore.tiered.s3 import (
    MIN_PART_BYTES,
    S3Backend,
    S3RequestError,
    S3UnavailableError,
    plan_parts,
    s3_backend_from_env,
)
from tests.mqcore.tiered.conftest import moto_server, new_s3_backend, s3_client_args

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

SEG = SegmentId("TopicTest", 7, SegmentType.COMMIT_LOG, 1073741824)


def _md5_8(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()[:8]


SEG_DIR = (
    f"tier/{_md5_8('DefaultCluster')}_DefaultCluster/broker-a/TopicTest/7/COMMIT_LOG/"
    f"{_md5_8('1073741824')}00000000001073741824/"
)


def raw_client(endpoint: str) -> S3Client:
    return boto3.client("s3", **s3_client_args(endpoint))


def objects(backend: S3Backend, endpoint: str) -> dict[str, int]:
    """Every object in the backend's bucket: key -> size."""
    listing = raw_client(endpoint).list_objects_v2(Bucket=backend.bucket)
    return {o["Key"]: o["Size"] for o in listing.get("Contents", [])}


def chunk(start: int) -> str:
    return f"{SEG_DIR}chunk/{start:020d}"


def reopen(backend: S3Backend, endpoint: str) -> S3Backend:
    """The same bucket through a new backend: a restarted broker (nothing cached)."""
    return S3Backend(
        backend.bucket,
        "tier/",
        cluster="DefaultCluster",
        broker="broker-a",
        endpoint_url=endpoint,
        access_key_id="testing",
        secret_access_key="testing",
    )


def test_one_object_per_append_under_the_posix_path(
    s3_backend: S3Backend, s3_endpoint: str
) -> None:
    s3_backend.create(SEG)
    s3_backend.append(SEG, b"abc", 0)
    s3_backend.append(SEG, b"defg", 3)
    s3_backend.append(SEG, b"", 7)  # nothing to write, no object
    assert objects(s3_backend, s3_endpoint) == {
        SEG_DIR + "created": 0,
        chunk(0): 3,
        chunk(3): 4,
    }
    assert s3_backend.size(SEG) == 7
    assert reopen(s3_backend, s3_endpoint).size(SEG) == 7  # from the listing alone


def test_reads_span_chunks_before_and_after_composing(
    s3_backend: S3Backend, s3_endpoint: str
) -> None:
    rng = random.Random(5)
    data = bytearray()
    s3_backend.create(SEG)
    for _ in range(30):
        piece = rng.randbytes(rng.randint(1, 300))
        assert s3_backend.append(SEG, piece, len(data)) == len(data) + len(piece)
        data += piece
    probes = [(rng.randrange(len(data) + 10), rng.randrange(1000)) for _ in range(40)]
    for position, length in probes:
        assert s3_backend.read(SEG, position, length) == data[position : position + length]

    s3_backend.seal(SEG)
    # All chunks were small: one part, downloaded and uploaded again.
    assert (s3_backend.stats.copied_bytes, s3_backend.stats.reuploaded_bytes) == (0, len(data))
    assert objects(s3_backend, s3_endpoint) == {
        SEG_DIR + "created": 0,
        SEG_DIR + "segment": len(data),
    }
    for backend in (s3_backend, reopen(s3_backend, s3_endpoint)):
        assert backend.is_sealed(SEG)
        assert backend.size(SEG) == len(data)
        for position, length in probes:
            assert backend.read(SEG, position, length) == data[position : position + length]


def test_seal_copies_big_chunks_server_side_and_reuploads_small_runs(
    s3_backend: S3Backend, s3_endpoint: str
) -> None:
    """Parts but the last must be >= 5 MiB (M). Chunks [1000][2M+10][100][M+1][200] compose
    as: 1000 B + the first M-1000 B of the big chunk (uploaded), the rest of it (copied
    server-side), [100][M+1] (uploaded: copying M+1 would leave a 100 B middle part), [200]."""
    m = MIN_PART_BYTES
    rng = random.Random(9)
    sizes = [1000, 2 * m + 10, 100, m + 1, 200]
    data = b"".join(rng.randbytes(n) for n in sizes)
    s3_backend.create(SEG)
    position = 0
    for n in sizes:
        position = s3_backend.append(SEG, data[position : position + n], position)
    s3_backend.seal(SEG)
    assert s3_backend.stats.composed_segments == 1
    assert s3_backend.stats.copied_bytes == m + 1010
    assert s3_backend.stats.reuploaded_bytes == m + (m + 101) + 200
    assert objects(s3_backend, s3_endpoint) == {
        SEG_DIR + "created": 0,
        SEG_DIR + "segment": len(data),
    }
    fresh = reopen(s3_backend, s3_endpoint)
    assert fresh.read(SEG, 0, len(data)) == data
    for boundary in (m, 2 * m + 1010, 3 * m + 1111):  # the part boundaries
        assert fresh.read(SEG, boundary - 5, 10) == data[boundary - 5 : boundary + 5]


@given(st.lists(st.integers(0, 40), max_size=30))
def test_plan_parts_is_valid_for_any_chunk_sizes(sizes: list[int]) -> None:
    """With a 10-byte minimum: the parts cover every byte once, in order; all but the last
    reach the minimum; copy parts are one slice; uploaded parts stay under 3x the minimum."""
    parts = plan_parts(sizes, min_part_bytes=10)
    slices = [s for part in parts for s in part.slices]
    ends: dict[int, int] = {}
    for index, start, end in slices:
        assert start == ends.get(index, 0) and start < end <= sizes[index]
        ends[index] = end
    assert ends == {i: n for i, n in enumerate(sizes) if n}
    order = [index for index, _, _ in slices]
    assert order == sorted(order)
    assert all(part.size >= 10 for part in parts[:-1])
    assert all(len(part.slices) == 1 for part in parts if part.copy)
    assert all(part.size < 30 for part in parts if not part.copy)


def test_truncating_a_composed_segment_keeps_the_prefix_as_chunk_zero(
    s3_backend: S3Backend, s3_endpoint: str
) -> None:
    s3_backend.create(SEG)
    for position, piece in ((0, b"hello "), (6, b"tiered "), (13, b"world")):
        s3_backend.append(SEG, piece, position)
    s3_backend.seal(SEG)
    assert SEG_DIR + "segment" in objects(s3_backend, s3_endpoint)
    s3_backend.truncate(SEG, 9)
    assert objects(s3_backend, s3_endpoint) == {SEG_DIR + "created": 0, chunk(0): 9}
    assert not s3_backend.is_sealed(SEG)
    assert s3_backend.append(SEG, b"!", 9) == 10
    assert s3_backend.read(SEG, 0, 100) == b"hello tie!"
    s3_backend.truncate(SEG, 7)  # cuts chunk 0 in place, drops chunk 9
    assert objects(s3_backend, s3_endpoint) == {SEG_DIR + "created": 0, chunk(0): 7}
    assert reopen(s3_backend, s3_endpoint).read(SEG, 0, 100) == b"hello t"


def test_seal_without_composing_is_a_marker(s3_endpoint: str) -> None:
    backend = new_s3_backend(s3_endpoint, compose_on_seal=False)
    backend.create(SEG)
    backend.append(SEG, b"abc", 0)
    backend.append(SEG, b"def", 3)
    backend.seal(SEG)
    assert objects(backend, s3_endpoint) == {
        SEG_DIR + "created": 0,
        SEG_DIR + "sealed": 0,
        chunk(0): 3,
        chunk(3): 3,
    }
    assert reopen(backend, s3_endpoint).is_sealed(SEG)
    assert backend.read(SEG, 1, 4) == b"bcde"
    backend.truncate(SEG, 4)
    assert objects(backend, s3_endpoint) == {SEG_DIR + "created": 0, chunk(0): 3, chunk(3): 1}


def test_upload_whose_response_was_lost_is_a_position_error(
    s3_backend: S3Backend, s3_endpoint: str
) -> None:
    """The PUT landed but the broker died before hearing so: after the restart, the append
    at the old position is refused and truncate takes the segment back (flat_file resume)."""
    s3_backend.create(SEG)
    s3_backend.append(SEG, b"0123456789", 0)
    raw_client(s3_endpoint).put_object(Bucket=s3_backend.bucket, Key=chunk(10), Body=b"half")
    restarted = reopen(s3_backend, s3_endpoint)
    with pytest.raises(SegmentPositionError) as info:
        restarted.append(SEG, b"more", 10)
    assert (info.value.expected, info.value.actual) == (10, 14)
    restarted.truncate(SEG, 10)
    assert restarted.append(SEG, b"more", 10) == 14
    assert reopen(s3_backend, s3_endpoint).read(SEG, 0, 100) == b"0123456789more"


def test_leftovers_of_interrupted_deletes_and_truncates_do_not_count(
    s3_backend: S3Backend, s3_endpoint: str
) -> None:
    client = raw_client(s3_endpoint)
    # A delete that died after removing ``created``: not a segment, and create cleans it up.
    client.put_object(Bucket=s3_backend.bucket, Key=chunk(0), Body=b"old bytes")
    assert not s3_backend.exists(SEG)
    assert s3_backend.list_segments("TopicTest", 7, SegmentType.COMMIT_LOG) == []
    s3_backend.create(SEG)
    assert s3_backend.size(SEG) == 0
    assert objects(s3_backend, s3_endpoint) == {SEG_DIR + "created": 0}
    # A chunk after a gap (a truncate that died mid-way): ignored, then removed by the next
    # append, so it can never become part of the segment.
    s3_backend.append(SEG, b"0123456789", 0)
    client.put_object(Bucket=s3_backend.bucket, Key=chunk(20), Body=b"stray")
    restarted = reopen(s3_backend, s3_endpoint)
    assert restarted.size(SEG) == 10
    assert restarted.append(SEG, b"abcdefghij", 10) == 20
    assert chunk(20) not in objects(s3_backend, s3_endpoint)
    assert reopen(s3_backend, s3_endpoint).read(SEG, 0, 100) == b"0123456789abcdefghij"


def test_absence_is_never_cached(s3_backend: S3Backend, s3_endpoint: str) -> None:
    """Listings are cached per backend object, but only of segments that exist: one this
    object found missing is listed again when asked, so it sees another object's create."""
    with pytest.raises(SegmentMissingError):
        s3_backend.size(SEG)
    other = reopen(s3_backend, s3_endpoint)
    other.create(SEG)
    other.append(SEG, b"abc", 0)
    assert s3_backend.exists(SEG)
    assert s3_backend.size(SEG) == 3


def _assert_clean(error: BaseException) -> None:
    """Our error, with no botocore exception chained for a traceback to show."""
    assert isinstance(error, TieredStoreError)
    assert error.__cause__ is None and error.__suppress_context__


def test_server_down_is_a_clear_error(tmp_path: Path) -> None:
    with moto_server(tmp_path) as endpoint:
        backend = new_s3_backend(endpoint, max_attempts=2)
        backend.create(SEG)
        backend.append(SEG, b"abc", 0)
    with pytest.raises(S3UnavailableError) as info:
        backend.append(SEG, b"def", 3)
    message = str(info.value)
    assert endpoint in message and backend.bucket in message
    assert "unreachable" in message and "append 3 bytes" in message
    _assert_clean(info.value)
    with pytest.raises(S3UnavailableError) as info:
        reopen(backend, endpoint).read(SEG, 0, 3)
    _assert_clean(info.value)


class _SlowDown(BaseHTTPRequestHandler):
    """An S3 endpoint that is overloaded: 503 SlowDown to everything."""

    def _answer(self) -> None:
        body = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
        self.send_response(503)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def overloaded_endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowDown)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_http_5xx_is_unavailable(overloaded_endpoint: str) -> None:
    backend = S3Backend(
        "bucket",
        cluster="c",
        broker="b",
        endpoint_url=overloaded_endpoint,
        access_key_id="testing",
        secret_access_key="testing",
        max_attempts=1,
    )
    with pytest.raises(S3UnavailableError) as info:
        backend.size(SEG)
    assert info.value.code == "SlowDown"
    assert "SlowDown (HTTP 503)" in str(info.value)
    _assert_clean(info.value)


def test_missing_bucket_is_a_request_error(s3_endpoint: str) -> None:
    backend = S3Backend(
        "no-such-bucket",
        cluster="c",
        broker="b",
        endpoint_url=s3_endpoint,
        access_key_id="testing",
        secret_access_key="testing",
    )
    with pytest.raises(S3RequestError) as info:
        backend.create(SEG)
    assert info.value.code == "NoSuchBucket"
    assert "'no-such-bucket'" in str(info.value) and "does not exist" in str(info.value)
    _assert_clean(info.value)


def test_backend_from_the_broker_settings(s3_endpoint: str) -> None:
    bucket = new_s3_backend(s3_endpoint).bucket
    env = {
        "CAIRN_TIERED_S3_BUCKET": bucket,
        "CAIRN_TIERED_S3_PREFIX": "cold",
        "CAIRN_TIERED_S3_ENDPOINT": s3_endpoint,
        "CAIRN_TIERED_S3_ACCESS_KEY_ID": "testing",
        "CAIRN_TIERED_S3_SECRET_ACCESS_KEY": "testing",
        "CAIRN_TIERED_S3_COMPOSE": "false",
    }
    backend = s3_backend_from_env(env, "DefaultCluster", "broker-a")
    assert not backend.compose_on_seal
    backend.create(SEG)
    backend.append(SEG, b"abc", 0)
    assert objects(backend, s3_endpoint) == {
        "cold/" + SEG_DIR.removeprefix("tier/") + "created": 0,
        "cold/" + SEG_DIR.removeprefix("tier/") + "chunk/" + "0" * 20: 3,
    }
    with pytest.raises(ValueError, match="CAIRN_TIERED_S3_BUCKET"):
        s3_backend_from_env({**env, "CAIRN_TIERED_S3_BUCKET": " "}, "c", "b")
    with pytest.raises(ValueError, match="CAIRN_TIERED_S3_COMPOSE"):
        s3_backend_from_env({**env, "CAIRN_TIERED_S3_COMPOSE": "maybe"}, "c", "b")


def test_mqcore_imports_without_boto3() -> None:
    """boto3 is the ``s3`` extra: mqcore imports without it, and the backend says what to
    install."""
    script = (
        "import sys\n"
        "sys.modules['boto3'] = sys.modules['botocore'] = None\n"
        "import mqcore.tiered\n"
        "from mqcore.tiered.s3 import S3Backend, S3RequestError\n"
        "try:\n"
        "    S3Backend('b', cluster='c', broker='b')\n"
        "except S3RequestError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert "pip install 'cairn[s3]'" in result.stdout
