"""The integrity record of a config file: ``X.sum``, beside RocketMQ's ``X`` and ``X.bak``.

RocketMQ's config files carry no checksum, and their bytes must stay RocketMQ's (spec 8.1), so
the check lives in a sidecar that RocketMQ never reads. ``X.sum`` lists the versions of ``X``
that a copy on disk (``X`` or ``X.bak``) may legitimately hold, newest first: each is a
*generation* (a counter, +1 per write of ``X``), the size and the SHA-256 of the whole file::

    {"file":"topics.json","format":1,"versions":[{"bytes":2345,"generation":12,"sha256":"9f…"},{"bytes":2291,"generation":11,"sha256":"04…"}]}
    sha256:<hex digest of the line above>

The second line checks the first, so a damaged sidecar is told apart from a damaged ``X``.
A copy whose size and digest match a listed version is *intact* and is that generation; a copy
that matches none was changed after it was written (a flipped byte that still parses, a cut,
an edit by hand) and is *damaged*. SHA-256 rather than a CRC: config files are small and
written at most every few seconds (a 3 MB ``topics.json`` hashes in about 2 ms), and a digest
leaves no damage pattern undetected.

How writes keep ``X``, ``X.bak`` and ``X.sum`` consistent at every crash point is told in
:mod:`mqcore.metadata.checked_file`; this module only encodes, decodes, reads and atomically
replaces the sidecar.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from mqcore.metadata.jsonfile import StrPath, sync_dir, temp_path, write_temp

SIDECAR_SUFFIX = ".sum"
FORMAT = 1
_DIGEST_PREFIX = "sha256:"


class SidecarError(ValueError):
    """The sidecar's bytes are not a well-formed, self-consistent integrity record."""


@dataclass(frozen=True, slots=True)
class Version:
    """One committed version of a config file: its generation, size and SHA-256 (hex)."""

    generation: int
    size_bytes: int
    sha256: str

    @classmethod
    def of(cls, generation: int, data: bytes) -> Version:
        """The version describing ``data`` as generation ``generation``."""
        return cls(generation, len(data), hashlib.sha256(data).hexdigest())

    def matches(self, data: bytes) -> bool:
        """Whether ``data`` is exactly this version (size first: a cut file fails cheaply)."""
        return len(data) == self.size_bytes and hashlib.sha256(data).hexdigest() == self.sha256

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.size_bytes, "generation": self.generation, "sha256": self.sha256}


@dataclass(frozen=True, slots=True)
class Sidecar:
    """The versions of ``file_name`` a copy may hold, newest first (never empty)."""

    file_name: str
    versions: tuple[Version, ...]

    @property
    def newest(self) -> Version:
        return self.versions[0]

    def find(self, data: bytes) -> Version | None:
        """The listed version ``data`` is, or None (the copy is damaged)."""
        for version in self.versions:
            if version.matches(data):
                return version
        return None


def sidecar_path(path: StrPath) -> str:
    """``X.sum`` for the config file ``X``."""
    return os.fspath(path) + SIDECAR_SUFFIX


def encode_sidecar(sidecar: Sidecar) -> bytes:
    """The sidecar's file bytes: the JSON line and the line with its digest."""
    body = json.dumps(
        {
            "file": sidecar.file_name,
            "format": FORMAT,
            "versions": [v.to_json() for v in sidecar.versions],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
    return f"{body}\n{_DIGEST_PREFIX}{digest}\n".encode()


def decode_sidecar(data: bytes) -> Sidecar:
    """Parse and check a sidecar's bytes.

    Raises:
        SidecarError: not two lines, the digest line does not match the JSON line, or the JSON
            is not a version-1 record with at least one well-typed version.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SidecarError(f"not UTF-8 ({exc})") from exc
    lines = text.split("\n")
    if len(lines) != 3 or lines[2] != "" or not lines[1].startswith(_DIGEST_PREFIX):
        raise SidecarError("not a JSON line followed by a sha256 line")
    body, digest = lines[0], lines[1].removeprefix(_DIGEST_PREFIX)
    if hashlib.sha256(body.encode("utf-8")).hexdigest() != digest:
        raise SidecarError("its digest line does not match its content")
    try:
        raw = json.loads(body)
        if raw["format"] != FORMAT:
            raise SidecarError(f"format {raw['format']!r}, expected {FORMAT}")
        versions = tuple(
            Version(_int(v["generation"]), _int(v["bytes"]), _hex(v["sha256"]))
            for v in raw["versions"]
        )
        file_name = raw["file"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SidecarError(f"malformed ({exc!r})") from exc
    if not versions or not isinstance(file_name, str):
        raise SidecarError("malformed (no versions or no file name)")
    return Sidecar(file_name, versions)


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"expected a non-negative integer, got {value!r}")
    return value


def _hex(value: object) -> str:
    if not isinstance(value, str) or len(value) != 64:
        raise TypeError(f"expected a SHA-256 hex digest, got {value!r}")
    int(value, 16)
    return value


def read_sidecar(path: StrPath) -> tuple[Sidecar | None, str | None]:
    """Read the sidecar of config file ``path``.

    Returns:
        ``(sidecar, None)`` when it is intact, ``(None, None)`` when there is none (a file
        written by RocketMQ or an older Cairn), ``(None, reason)`` when it is damaged.
    """
    try:
        with open(sidecar_path(path), "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None, None
    try:
        sidecar = decode_sidecar(data)
    except SidecarError as exc:
        return None, str(exc)
    expected = os.path.basename(os.fspath(path))
    if sidecar.file_name != expected:
        return None, f"it describes {sidecar.file_name!r}, not {expected!r}"
    return sidecar, None


def stage_sidecar(path: StrPath, versions: tuple[Version, ...]) -> None:
    """First half of replacing the sidecar of ``path``: write ``X.sum.tmp`` and fsync it."""
    sidecar = Sidecar(os.path.basename(os.fspath(path)), versions)
    write_temp(sidecar_path(path), encode_sidecar(sidecar))


def install_sidecar(path: StrPath) -> None:
    """Second half: rename ``X.sum.tmp`` over ``X.sum`` and fsync the directory. The fsync
    makes the new record durable *before* the caller renames the new ``X`` into place, so no
    power loss can leave a new ``X`` beside an old record."""
    target = sidecar_path(path)
    os.replace(temp_path(target), target)
    sync_dir(target)


def write_sidecar(path: StrPath, versions: tuple[Version, ...]) -> None:
    """Replace the sidecar of ``path`` atomically (:func:`stage_sidecar`, :func:`install_sidecar`)."""
    stage_sidecar(path, versions)
    install_sidecar(path)
