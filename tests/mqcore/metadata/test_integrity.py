"""The integrity record X.sum: format, self-check, matching copies."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.metadata.integrity import (
    Sidecar,
    SidecarError,
    Version,
    decode_sidecar,
    encode_sidecar,
    read_sidecar,
    sidecar_path,
    write_sidecar,
)

OLD = b'{\n\t"v":1\n}'
NEW = b'{\n\t"v":2\n}'


def test_round_trip_and_newest_first(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    versions = (Version.of(12, NEW), Version.of(11, OLD))
    write_sidecar(path, versions)
    sidecar, damage = read_sidecar(path)
    assert damage is None and sidecar == Sidecar("topics.json", versions)
    assert sidecar.newest.generation == 12
    assert sidecar.find(OLD) == versions[1] and sidecar.find(NEW) == versions[0]
    assert sidecar.find(NEW + b" ") is None
    raw = Path(sidecar_path(path)).read_text()
    assert raw.count("\n") == 2 and raw.splitlines()[1].startswith("sha256:")
    assert not Path(sidecar_path(path) + ".tmp").exists()


def test_no_sidecar_is_not_damage(tmp_path: Path) -> None:
    assert read_sidecar(tmp_path / "topics.json") == (None, None)


def test_every_flipped_byte_of_the_record_is_detected(tmp_path: Path) -> None:
    data = encode_sidecar(Sidecar("topics.json", (Version.of(3, NEW), Version.of(2, OLD))))
    for position in range(len(data)):
        for mask in (0x01, 0x20, 0x80):
            damaged = bytearray(data)
            damaged[position] ^= mask
            with pytest.raises(SidecarError):
                decode_sidecar(bytes(damaged))


@pytest.mark.parametrize(
    "data",
    [b"", b"{}", b'{"format":1}\nsha256:00\n', encode_sidecar(Sidecar("t", ()))],
)
def test_malformed_records_are_refused(data: bytes) -> None:
    with pytest.raises(SidecarError):
        decode_sidecar(data)


def test_a_record_of_another_file_counts_as_damaged(tmp_path: Path) -> None:
    write_sidecar(tmp_path / "other.json", (Version.of(1, OLD),))
    Path(sidecar_path(tmp_path / "other.json")).rename(sidecar_path(tmp_path / "topics.json"))
    sidecar, damage = read_sidecar(tmp_path / "topics.json")
    assert sidecar is None and damage is not None and "other.json" in damage


def test_a_cut_copy_never_matches() -> None:
    version = Version.of(1, NEW)
    assert version.matches(NEW)
    assert not any(version.matches(NEW[:n]) for n in range(len(NEW)))
