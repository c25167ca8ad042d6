"""One contract suite for every segment backend (memory, POSIX and S3), plus the POSIX layout.

S3-specific behaviour (chunks, composing on seal, errors) is in test_s3_backend.py."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from mqcore.tiered import (
    MemoryBackend,
    PosixBackend,
    SegmentBackend,
    SegmentExistsError,
    SegmentId,
    SegmentMissingError,
    SegmentPositionError,
    SegmentSealedError,
    SegmentType,
)

SEG = SegmentId("TopicTest", 3, SegmentType.COMMIT_LOG, 0)


@pytest.fixture(params=["memory", "posix", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> SegmentBackend:
    """Every backend, S3 (a moto server) included; conftest's ``backend``, which the flat-file
    tests use, stays on the two local ones."""
    if request.param == "memory":
        return MemoryBackend()
    if request.param == "posix":
        return PosixBackend(tmp_path / "tier", "DefaultCluster", "broker-a")
    s3: SegmentBackend = request.getfixturevalue("s3_backend")
    return s3


def test_create_exists_size(backend: SegmentBackend) -> None:
    assert not backend.exists(SEG)
    backend.create(SEG)
    assert backend.exists(SEG)
    assert backend.size(SEG) == 0
    with pytest.raises(SegmentExistsError):
        backend.create(SEG)


def test_missing_segment_raises(backend: SegmentBackend) -> None:
    for call in (
        lambda: backend.size(SEG),
        lambda: backend.read(SEG, 0, 1),
        lambda: backend.append(SEG, b"x", 0),
        lambda: backend.seal(SEG),
        lambda: backend.is_sealed(SEG),
        lambda: backend.truncate(SEG, 0),
    ):
        with pytest.raises(SegmentMissingError):
            call()
    backend.delete(SEG)  # deleting a missing segment is fine


def test_append_and_read_ranges(backend: SegmentBackend) -> None:
    backend.create(SEG)
    assert backend.append(SEG, b"hello ", 0) == 6
    assert backend.append(SEG, b"world", 6) == 11
    assert backend.size(SEG) == 11
    assert backend.read(SEG, 0, 11) == b"hello world"
    assert backend.read(SEG, 6, 3) == b"wor"
    assert backend.read(SEG, 8, 100) == b"rld"  # short only at the end
    assert backend.read(SEG, 11, 5) == b""
    with pytest.raises(ValueError):
        backend.read(SEG, -1, 1)


@pytest.mark.parametrize("position", [0, 5, 7])
def test_append_at_wrong_position_raises_and_writes_nothing(
    backend: SegmentBackend, position: int
) -> None:
    backend.create(SEG)
    backend.append(SEG, b"abcdef", 0)
    with pytest.raises(SegmentPositionError) as info:
        backend.append(SEG, b"zz", position)
    assert (info.value.expected, info.value.actual) == (position, 6)
    assert backend.read(SEG, 0, 100) == b"abcdef"


def test_seal_refuses_appends_and_truncate_unseals(backend: SegmentBackend) -> None:
    backend.create(SEG)
    backend.append(SEG, b"abcdef", 0)
    assert not backend.is_sealed(SEG)
    backend.seal(SEG)
    backend.seal(SEG)  # idempotent
    assert backend.is_sealed(SEG)
    with pytest.raises(SegmentSealedError):
        backend.append(SEG, b"g", 6)
    assert backend.read(SEG, 0, 6) == b"abcdef"
    backend.truncate(SEG, 4)
    assert not backend.is_sealed(SEG)
    assert backend.read(SEG, 0, 100) == b"abcd"
    assert backend.append(SEG, b"XY", 4) == 6
    with pytest.raises(ValueError):
        backend.truncate(SEG, 7)


def test_delete_and_list_segments(backend: SegmentBackend) -> None:
    bases = [0, 1024, 1 << 40]
    for base in reversed(bases):
        backend.create(SegmentId("t", 0, SegmentType.COMMIT_LOG, base))
    backend.create(SegmentId("t", 0, SegmentType.CONSUME_QUEUE, 20))
    backend.create(SegmentId("t", 1, SegmentType.COMMIT_LOG, 7))
    backend.seal(SegmentId("t", 0, SegmentType.COMMIT_LOG, 0))  # markers are not segments
    assert backend.list_segments("t", 0, SegmentType.COMMIT_LOG) == bases
    assert backend.list_segments("t", 0, SegmentType.CONSUME_QUEUE) == [20]
    assert backend.list_segments("t", 0, SegmentType.INDEX) == []
    assert backend.list_segments("other", 0, SegmentType.COMMIT_LOG) == []
    backend.delete(SegmentId("t", 0, SegmentType.COMMIT_LOG, 0))
    assert backend.list_segments("t", 0, SegmentType.COMMIT_LOG) == bases[1:]
    backend.create(SegmentId("t", 0, SegmentType.COMMIT_LOG, 0))  # recreated empty, unsealed
    assert not backend.is_sealed(SegmentId("t", 0, SegmentType.COMMIT_LOG, 0))


def test_concurrent_appenders_never_interleave(backend: SegmentBackend) -> None:
    backend.create(SEG)
    chunk_count = 50

    def writer(tag: bytes) -> None:
        done = 0
        while done < chunk_count:
            position = backend.size(SEG)
            try:
                backend.append(SEG, tag * 8, position)
                done += 1
            except SegmentPositionError:
                continue

    threads = [threading.Thread(target=writer, args=(t,)) for t in (b"a", b"b", b"c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data = backend.read(SEG, 0, 10_000)
    assert len(data) == 3 * chunk_count * 8
    chunks = [data[i : i + 8] for i in range(0, len(data), 8)]
    assert all(c in (b"a" * 8, b"b" * 8, b"c" * 8) for c in chunks)


# --- POSIX layout, exactly as spec 10 --------------------------------------------------------


def _md5_8(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()[:8]


@pytest.mark.parametrize(
    ("type_", "dirname"),
    [
        (SegmentType.COMMIT_LOG, "COMMIT_LOG"),
        (SegmentType.CONSUME_QUEUE, "CONSUME_QUEUE"),
        (SegmentType.INDEX, "INDEX"),
    ],
)
def test_posix_path_layout(tmp_path: Path, type_: SegmentType, dirname: str) -> None:
    backend = PosixBackend(tmp_path, "DefaultCluster", "broker-a")
    segment = SegmentId("TopicTest", 7, type_, 1073741824)
    backend.create(segment)
    expected = (
        tmp_path
        / f"{_md5_8('DefaultCluster')}_DefaultCluster"
        / "broker-a"
        / "TopicTest"
        / "7"
        / dirname
        / f"{_md5_8('1073741824')}00000000001073741824"
    )
    assert backend.path(segment) == expected
    assert expected.is_file()
    assert int(type_) == ("COMMIT_LOG", "CONSUME_QUEUE", "INDEX").index(dirname)


def test_posix_seal_is_a_marker_file(tmp_path: Path) -> None:
    backend = PosixBackend(tmp_path, "c", "b")
    backend.create(SEG)
    backend.seal(SEG)
    marker = Path(str(backend.path(SEG)) + ".sealed")
    assert marker.is_file()
    backend.delete(SEG)
    assert not marker.exists()
    assert not backend.path(SEG).exists()


def test_posix_partial_write_is_detected(tmp_path: Path) -> None:
    """A crash mid-append leaves a tail; the next append at the old size is refused."""
    backend = PosixBackend(tmp_path, "c", "b")
    backend.create(SEG)
    backend.append(SEG, b"0123456789", 0)
    with open(backend.path(SEG), "ab") as f:
        f.write(b"half")
    with pytest.raises(SegmentPositionError) as info:
        backend.append(SEG, b"more", 10)
    assert info.value.actual == 14
