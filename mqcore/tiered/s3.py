"""S3-compatible segment backend (AWS S3, MinIO, Ceph RGW, ...), through boto3.

boto3 is optional (``pip install 'cairn[s3]'``): it is imported when an :class:`S3Backend` is
built, so mqcore imports without it.

Object layout. A segment is a *directory* of objects whose path is the POSIX backend's file
path (spec 10) under ``prefix``::

    {prefix}{md5(cluster)[0:8]}_{cluster}/{broker}/{topic}/{queueId}/{TYPE}/{md5(str(base))[0:8]}{base:020d}/
        created                    empty; the segment exists (written with If-None-Match: *)
        chunk/{start:020d}         one object per append, named by its first byte position
        sealed                     empty; sealed without composing (one chunk or none)
        segment                    the composed segment: every byte; implies sealed

Why chunks: S3 objects are immutable, so an append cannot extend an object. Each ``append``
writes the new bytes as one chunk object named by its start position (RocketMQ's own S3
provider does the same); the segment's bytes are its chunks in position order, its size the
sum of their sizes, and a read may span several chunks (one ranged GET per chunk touched).

Why compose on seal: a sealed 1 GiB CommitLog segment uploaded in 4 MiB group commits would
otherwise stay 256 objects forever, and every cold read would list them. ``seal`` therefore
builds one ``segment`` object with a multipart upload. S3 requires every part but the last to
be at least 5 MiB, and UploadPartCopy (server-side copy) copies a range of *one* object, so
(:func:`plan_parts`): a chunk of 5 MiB or more becomes a part by server-side copy; runs of
smaller chunks are downloaded and uploaded again as one part of at least 5 MiB (memory: one
part, under 15 MiB). With RocketMQ's 4 MiB group commit most chunks are small, so composing
mostly costs one extra read and write of the segment; ``compose_on_seal=False`` keeps the
chunks and writes only the ``sealed`` marker. :attr:`S3Backend.stats` counts the bytes each
way. A segment composes from at most 10,000 parts, i.e. 48 GiB; spec 10's segments are 1 GiB.

Invariants and crash behaviour (each step below is one atomic S3 request):

* ``created`` is written last by ``create`` and deleted first by ``delete``, so a crash
  mid-delete leaves garbage in a directory without ``created``: the segment does not exist,
  ``list_segments`` skips it, and a later ``create`` of the same base removes the garbage.
* Chunks count only as a contiguous run from position 0. A chunk after a gap or overlapping
  its predecessor is garbage left by an interrupted ``truncate`` (which deletes the tail and
  then rewrites the chunk it cuts); it is ignored by ``size``/``read`` and deleted by the next
  ``append`` or ``truncate``. ``append`` checks the position against the listed size, so an
  upload whose response was lost (the chunk is there) makes the next append at the old
  position raise :class:`SegmentPositionError`, exactly like a partial POSIX write.
* When ``segment`` exists it holds every byte and the chunks are leftovers of a seal that
  died before deleting them. ``truncate`` of a composed segment first copies the kept prefix
  into ``chunk/0`` (server-side), then deletes ``segment``.

Errors: every S3 failure becomes an :class:`S3BackendError` (a ``TieredStoreError``) naming
the endpoint, bucket, operation and S3's own error code: :class:`S3UnavailableError` for the
transient ones (connection refused or reset, timeouts, HTTP 5xx, throttling; botocore has
already retried ``max_attempts`` times), :class:`S3RequestError` for the rest (no such
bucket, access denied, bad credentials). Callers never see a botocore exception.

Requests: the first operation on a segment lists its directory (one LIST); the listing is
then cached and kept up to date by this backend, so an append is one PUT, a read one ranged
GET per chunk touched (one in all once composed), ``size``/``is_sealed`` none. ``seal``,
``truncate`` and ``delete`` drop the cached listing, and so does any S3 error (a PUT that
timed out may still have landed), so the next call lists again and sees what S3 holds.

Thread-safety: every method is thread-safe. Each segment has its own lock, held across the
requests of one operation, so operations on one segment are serial while different queues
upload and read in parallel. One process must own a prefix: neither the locks nor the cached
listings span processes (two brokers must not share ``cluster``/``broker`` under one prefix);
a restarted broker lists afresh.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mqcore.tiered.backend import (
    SegmentBackend,
    SegmentExistsError,
    SegmentId,
    SegmentMissingError,
    SegmentPositionError,
    SegmentSealedError,
    SegmentType,
    TieredStoreError,
    check_range,
    check_truncate,
)
from mqcore.tiered.posix import md5_prefix, segment_file_name

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

#: S3's floor for every part of a multipart upload but the last (AWS, MinIO and moto agree).
MIN_PART_BYTES = 5 * 1024 * 1024
#: DeleteObjects takes at most this many keys per request.
_DELETE_BATCH = 1000
#: S3 error codes that mean "try again later" even when the status is not 5xx.
_TRANSIENT_CODES = frozenset(
    {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling"}
)

CREATED = "created"
SEALED = "sealed"
COMPOSED = "segment"
CHUNKS = "chunk/"
_POSITION_DIGITS = 20


class S3BackendError(TieredStoreError):
    """S3 refused or failed a request (root of this module's errors).

    ``code`` is S3's error code (``NoSuchBucket``, ``SlowDown``, ...) when S3 answered.
    """

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class S3UnavailableError(S3BackendError):
    """S3 cannot be reached or answers 5xx/throttling: transient, retry later."""


class S3RequestError(S3BackendError):
    """S3 refused the request (no such bucket, access denied, bad credentials, ...)."""


@dataclass(frozen=True, slots=True)
class _Chunk:
    key: str
    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(slots=True)
class _Layout:
    """One listing of a segment's directory, read under the segment's lock."""

    keys: list[str] = field(default_factory=list)
    created: bool = False
    sealed_marker: bool = False
    composed_size: int | None = None
    chunks: list[_Chunk] = field(default_factory=list)  # contiguous from position 0
    garbage: list[str] = field(default_factory=list)  # chunks that do not count

    @property
    def size(self) -> int:
        if self.composed_size is not None:
            return self.composed_size
        return self.chunks[-1].end if self.chunks else 0

    @property
    def sealed(self) -> bool:
        return self.composed_size is not None or self.sealed_marker


@dataclass(slots=True)
class S3Stats:
    """Bytes moved by ``seal`` while composing: server-side copy versus download+upload."""

    composed_segments: int = 0
    copied_bytes: int = 0
    reuploaded_bytes: int = 0


class S3Backend(SegmentBackend):
    """Segments as chunk objects in an S3 bucket (module docstring). Thread-safe.

    Args:
        bucket: an existing bucket.
        prefix: key prefix inside the bucket (``"tier/"``); a missing trailing ``/`` is added.
        cluster: ``brokerClusterName`` (first level of the layout).
        broker: ``brokerName``.
        endpoint_url: a non-AWS endpoint (``http://127.0.0.1:9000``); path-style addressing is
            used then, as MinIO and most S3-compatible servers need.
        region: the signing region.
        access_key_id, secret_access_key: static credentials; when None, boto3's usual chain
            (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, instance roles).
        client: a ready boto3 S3 client (the other connection arguments are then ignored).
        max_attempts: botocore's attempts per request (standard retry mode, with backoff).
        connect_timeout_s, read_timeout_s: per request.
        compose_on_seal: build one ``segment`` object when sealing (module docstring).

    Raises:
        S3RequestError: boto3 is not installed.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        cluster: str,
        broker: str,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        client: S3Client | None = None,
        max_attempts: int = 3,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
        compose_on_seal: bool = True,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        self.cluster = cluster
        self.broker = broker
        self.endpoint = endpoint_url or "AWS S3"
        self.compose_on_seal = compose_on_seal
        self.base_key = f"{self.prefix}{md5_prefix(cluster)}_{cluster}/{broker}/"
        self.stats = S3Stats()
        self._client = client or _make_client(
            endpoint_url,
            region,
            (access_key_id, secret_access_key),
            max_attempts,
            (connect_timeout_s, read_timeout_s),
        )
        self._locks_guard = threading.Lock()
        self._locks: dict[SegmentId, threading.Lock] = {}
        self._layouts: dict[SegmentId, _Layout] = {}

    # --- keys ------------------------------------------------------------------------------

    def type_prefix(self, topic: str, queue_id: int, type: SegmentType) -> str:
        """The key prefix of one queue's segments of one type (ends with ``/``)."""
        return f"{self.base_key}{topic}/{queue_id}/{type.name}/"

    def segment_prefix(self, segment: SegmentId) -> str:
        """The key prefix of ``segment``'s objects: the POSIX file path plus ``/``."""
        return (
            self.type_prefix(segment.topic, segment.queue_id, segment.type)
            + segment_file_name(segment.base_offset)
            + "/"
        )

    def chunk_key(self, segment: SegmentId, start: int) -> str:
        """The key of the chunk holding ``segment``'s bytes from ``start``."""
        return f"{self.segment_prefix(segment)}{CHUNKS}{start:0{_POSITION_DIGITS}d}"

    # --- the interface ---------------------------------------------------------------------

    def create(self, segment: SegmentId) -> None:
        with self._locked(segment):
            layout = self._layout(segment)
            if layout.created:
                raise SegmentExistsError(segment)
            self._delete_keys(layout.keys)  # garbage of an interrupted delete
            try:
                with self._translate(f"create {segment}"):
                    self._client.put_object(
                        Bucket=self.bucket,
                        Key=self.segment_prefix(segment) + CREATED,
                        Body=b"",
                        IfNoneMatch="*",
                    )
            except S3RequestError as exc:
                if exc.code == "PreconditionFailed":  # created by another process meanwhile
                    raise SegmentExistsError(segment) from None
                raise
            key = self.segment_prefix(segment) + CREATED
            self._layouts[segment] = _Layout(keys=[key], created=True)

    def exists(self, segment: SegmentId) -> bool:
        cached = self._layouts.get(segment)
        if cached is not None:
            return cached.created
        with self._translate(f"check {segment}"):
            response = self._client.list_objects_v2(
                Bucket=self.bucket, Prefix=self.segment_prefix(segment) + CREATED, MaxKeys=1
            )
        return response.get("KeyCount", 0) > 0

    def size(self, segment: SegmentId) -> int:
        with self._locked(segment):
            return self._existing(segment).size

    def read(self, segment: SegmentId, position: int, length: int) -> bytes:
        check_range(position, length)
        with self._locked(segment):
            layout = self._existing(segment)
            end = min(layout.size, position + length)
            if position >= end:
                return b""
            if layout.composed_size is not None:
                return self._get(self.segment_prefix(segment) + COMPOSED, position, end)
            parts = [
                self._get(c.key, max(position, c.start) - c.start, min(end, c.end) - c.start)
                for c in layout.chunks
                if c.start < end and c.end > position
            ]
            return b"".join(parts)

    def append(self, segment: SegmentId, data: bytes, position: int) -> int:
        with self._locked(segment):
            layout = self._existing(segment)
            if layout.sealed:
                raise SegmentSealedError(segment)
            if position != layout.size:
                raise SegmentPositionError(segment, position, layout.size)
            if layout.garbage:
                self._delete_keys(layout.garbage)
                gone = set(layout.garbage)
                layout.keys = [k for k in layout.keys if k not in gone]
                layout.garbage = []
            if data:
                key = self.chunk_key(segment, position)
                with self._translate(f"append {len(data)} bytes to {segment}"):
                    self._client.put_object(Bucket=self.bucket, Key=key, Body=data)
                layout.keys.append(key)
                layout.chunks.append(_Chunk(key, position, len(data)))
            return position + len(data)

    def seal(self, segment: SegmentId) -> None:
        with self._locked(segment):
            layout = self._existing(segment)
            if layout.sealed:
                return
            self._layouts.pop(segment, None)  # re-listed by the next call
            if self.compose_on_seal and len(layout.chunks) > 1:
                self._compose(segment, layout.chunks)
                self._delete_keys([c.key for c in layout.chunks] + layout.garbage)
                return
            with self._translate(f"seal {segment}"):
                self._client.put_object(
                    Bucket=self.bucket, Key=self.segment_prefix(segment) + SEALED, Body=b""
                )

    def is_sealed(self, segment: SegmentId) -> bool:
        with self._locked(segment):
            return self._existing(segment).sealed

    def truncate(self, segment: SegmentId, size: int) -> None:
        with self._locked(segment):
            layout = self._existing(segment)
            check_truncate(segment, size, layout.size)
            self._layouts.pop(segment, None)  # re-listed by the next call
            prefix = self.segment_prefix(segment)
            if layout.composed_size is not None:
                first = self.chunk_key(segment, 0)
                if size > 0:
                    self._copy_prefix(prefix + COMPOSED, first, size)
                leftovers = [k for k in layout.garbage if k != first or size == 0]
                self._delete_keys(leftovers + [prefix + SEALED])
                self._delete_keys([prefix + COMPOSED])  # last: it holds the bytes until now
                return
            # Tail first, then the chunk that straddles the cut: a crash in between leaves
            # a contiguous prefix (module docstring).
            self._delete_keys([c.key for c in layout.chunks if c.start >= size] + layout.garbage)
            for c in layout.chunks:
                if c.start < size < c.end:
                    self._copy_prefix(c.key, c.key, size - c.start)
            if layout.sealed_marker:
                self._delete_keys([prefix + SEALED])

    def delete(self, segment: SegmentId) -> None:
        with self._locked(segment):
            layout = self._layout(segment)
            self._layouts.pop(segment, None)
            created = self.segment_prefix(segment) + CREATED
            if layout.created:
                self._delete_keys([created])  # first: the segment stops existing at once
            self._delete_keys([k for k in layout.keys if k != created])

    def list_segments(self, topic: str, queue_id: int, type: SegmentType) -> list[int]:
        prefix = self.type_prefix(topic, queue_id, type)
        bases: list[int] = []
        for key, _ in self._list(prefix):
            name, slash, leaf = key[len(prefix) :].partition("/")
            digits = name[-_POSITION_DIGITS:]
            if slash and leaf == CREATED and digits.isdigit():
                base = int(digits)
                if name == segment_file_name(base):
                    bases.append(base)
        return sorted(bases)

    # --- helpers ---------------------------------------------------------------------------

    @contextmanager
    def _locked(self, segment: SegmentId) -> Iterator[None]:
        """Hold ``segment``'s lock; forget its cached listing if S3 failed meanwhile (a
        request that timed out may still have been applied)."""
        # One lock per segment ever touched: a few hundred bytes each, kept for the process.
        with self._locks_guard:
            lock = self._locks.get(segment)
            if lock is None:
                lock = self._locks[segment] = threading.Lock()
        with lock:
            try:
                yield
            except BaseException as exc:
                if isinstance(exc, S3BackendError) or not isinstance(exc, TieredStoreError):
                    self._layouts.pop(segment, None)
                raise

    @contextmanager
    def _translate(self, action: str) -> Iterator[None]:
        """Turn botocore's exceptions into :class:`S3BackendError` (module docstring)."""
        try:
            yield
        except TieredStoreError:
            raise
        except Exception as exc:
            error = _translate_error(exc, f"S3 {self.endpoint} bucket {self.bucket!r}: {action}")
            if error is None:
                raise
            raise error from None

    def _list(self, prefix: str) -> Iterator[tuple[str, int]]:
        with self._translate(f"list {prefix}"):
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    yield obj["Key"], obj.get("Size", 0)

    def _layout(self, segment: SegmentId) -> _Layout:
        """The segment's listing: cached, or one LIST request (caller holds its lock)."""
        cached = self._layouts.get(segment)
        if cached is not None:
            return cached
        prefix = self.segment_prefix(segment)
        layout = _Layout()
        chunks: list[_Chunk] = []
        for key, size in self._list(prefix):
            layout.keys.append(key)
            leaf = key[len(prefix) :]
            if leaf == CREATED:
                layout.created = True
            elif leaf == SEALED:
                layout.sealed_marker = True
            elif leaf == COMPOSED:
                layout.composed_size = size
            elif leaf.startswith(CHUNKS) and leaf[len(CHUNKS) :].isdigit():
                chunks.append(_Chunk(key, int(leaf[len(CHUNKS) :]), size))
            else:
                layout.garbage.append(key)  # unknown leaf: nothing this backend wrote
        chunks.sort(key=lambda c: c.start)
        end = 0
        for chunk in chunks:
            if layout.composed_size is None and chunk.start == end:
                layout.chunks.append(chunk)
                end = chunk.end
            else:
                layout.garbage.append(chunk.key)
        if layout.created:  # never cache absence: another backend object may create it
            self._layouts[segment] = layout
        return layout

    def _existing(self, segment: SegmentId) -> _Layout:
        layout = self._layout(segment)
        if not layout.created:
            raise SegmentMissingError(segment)
        return layout

    def _get(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of one object (``end > start``)."""
        with self._translate(f"read {key} bytes {start}..{end}"):
            response = self._client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end - 1}"
            )
            return response["Body"].read()

    def _delete_keys(self, keys: list[str]) -> None:
        for i in range(0, len(keys), _DELETE_BATCH):
            batch = keys[i : i + _DELETE_BATCH]
            with self._translate(f"delete {len(batch)} objects"):
                response = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            errors = response.get("Errors", [])
            if errors:
                first = errors[0]
                raise S3RequestError(
                    f"S3 {self.endpoint} bucket {self.bucket!r}: deleting {first.get('Key')} "
                    f"failed with {first.get('Code')}: {first.get('Message')}"
                    + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else "")
                )

    def _copy_prefix(self, source: str, target: str, length: int) -> None:
        """Server-side: ``target`` = the first ``length`` bytes of ``source`` (``length > 0``).

        A one-part multipart upload: its only part is the last, so any size is allowed, and
        UploadPartCopy takes a byte range where CopyObject does not.
        """
        with self._multipart(target, f"cut {source} to {length} bytes") as (upload_id, parts):
            with self._translate(f"copy {source} bytes 0..{length} to {target}"):
                response = self._client.upload_part_copy(
                    Bucket=self.bucket,
                    Key=target,
                    UploadId=upload_id,
                    PartNumber=1,
                    CopySource={"Bucket": self.bucket, "Key": source},
                    CopySourceRange=f"bytes=0-{length - 1}",
                )
            parts.append({"ETag": response["CopyPartResult"].get("ETag", ""), "PartNumber": 1})

    def _compose(self, segment: SegmentId, chunks: list[_Chunk]) -> None:
        """Write ``segment`` = the chunks in order, as a multipart upload (module docstring)."""
        target = self.segment_prefix(segment) + COMPOSED
        copied = uploaded = 0
        with self._multipart(target, f"compose {segment}") as (upload_id, parts):
            for part in plan_parts([c.size for c in chunks]):
                number = len(parts) + 1
                if part.copy:
                    index, start, end = part.slices[0]
                    with self._translate(f"copy {chunks[index].key} into {target}"):
                        response = self._client.upload_part_copy(
                            Bucket=self.bucket,
                            Key=target,
                            UploadId=upload_id,
                            PartNumber=number,
                            CopySource={"Bucket": self.bucket, "Key": chunks[index].key},
                            CopySourceRange=f"bytes={start}-{end - 1}",
                        )
                    etag = response["CopyPartResult"].get("ETag", "")
                    copied += part.size
                else:
                    body = b"".join(self._get(chunks[i].key, a, b) for i, a, b in part.slices)
                    with self._translate(f"upload part {number} of {target}"):
                        etag = self._client.upload_part(
                            Bucket=self.bucket,
                            Key=target,
                            UploadId=upload_id,
                            PartNumber=number,
                            Body=body,
                        ).get("ETag", "")
                    uploaded += part.size
                parts.append({"ETag": etag, "PartNumber": number})
        with self._locks_guard:  # segments of other queues compose at the same time
            self.stats.composed_segments += 1
            self.stats.copied_bytes += copied
            self.stats.reuploaded_bytes += uploaded

    @contextmanager
    def _multipart(self, key: str, action: str) -> Iterator[tuple[str, list[CompletedPartTypeDef]]]:
        """A multipart upload to ``key``: completed on success, aborted on any error (an
        abort that fails too leaves the parts to the bucket's lifecycle rule)."""
        with self._translate(f"{action}: start upload"):
            upload_id = self._client.create_multipart_upload(Bucket=self.bucket, Key=key)[
                "UploadId"
            ]
        parts: list[CompletedPartTypeDef] = []
        try:
            yield upload_id, parts
            with self._translate(f"{action}: complete upload"):
                self._client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                )
        except BaseException:
            try:
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            except Exception:  # the original error is the one to report
                pass
            raise


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a composing multipart upload: byte ranges ``(chunk index, start, end)``.

    A copy part is one range of one chunk, copied server-side (UploadPartCopy); any other
    part is downloaded and uploaded again.
    """

    copy: bool
    slices: tuple[tuple[int, int, int], ...]

    @property
    def size(self) -> int:
        return sum(end - start for _, start, end in self.slices)


def plan_parts(sizes: list[int], min_part_bytes: int = MIN_PART_BYTES) -> list[Part]:
    """The parts that compose chunks of ``sizes`` bytes, in order, into one object.

    Every part but the last holds at least ``min_part_bytes`` (S3's rule). A chunk of at least
    ``min_part_bytes`` is copied server-side. Smaller chunks gather into a downloaded run; a
    big chunk after a run tops the run up to ``min_part_bytes`` from its head and has the rest
    copied, unless that rest would be a too-small middle part, in which case it joins the run
    whole. So no uploaded part exceeds ``3 * min_part_bytes`` (the memory composing needs),
    whatever the chunk sizes (a long S3 outage can make one append, hence one chunk, huge).
    """
    parts: list[Part] = []
    run: list[tuple[int, int, int]] = []
    run_bytes = 0
    for index, size in enumerate(sizes):
        last = index == len(sizes) - 1
        start = 0
        if run and size >= min_part_bytes:
            top_up = min_part_bytes - run_bytes
            if size - top_up >= min_part_bytes or last:
                parts.append(Part(False, (*run, (index, 0, top_up))))
                run, run_bytes, start = [], 0, top_up
        if not run and (size - start >= min_part_bytes or (last and start > 0)):
            parts.append(Part(True, ((index, start, size),)))
            continue
        if size > start:
            run.append((index, start, size))
            run_bytes += size - start
        if run and (run_bytes >= min_part_bytes or last):
            parts.append(Part(False, tuple(run)))
            run, run_bytes = [], 0
    return parts


#: The broker's settings for this backend (``CAIRN_TIERED_BACKEND=s3``): variable ->
#: (default, meaning); ``cairn/env.py`` documents them from here.
S3_VARIABLES: dict[str, tuple[str, str]] = {
    "CAIRN_TIERED_S3_BUCKET": ("", "Bucket of the `s3` tier backend (required with it)."),
    "CAIRN_TIERED_S3_PREFIX": ("", "Key prefix inside the bucket."),
    "CAIRN_TIERED_S3_ENDPOINT": ("", "S3-compatible endpoint URL (MinIO, Ceph); unset: AWS."),
    "CAIRN_TIERED_S3_REGION": ("us-east-1", "Signing region."),
    "CAIRN_TIERED_S3_ACCESS_KEY_ID": (
        "",
        "Access key; unset: boto3's chain (AWS_* variables, profile, role).",
    ),
    "CAIRN_TIERED_S3_SECRET_ACCESS_KEY": ("", "Secret key, with the access key."),
    "CAIRN_TIERED_S3_COMPOSE": ("true", "Compose a sealed segment's chunks into one object."),
}


def s3_backend_from_env(env: Mapping[str, str], cluster: str, broker: str) -> S3Backend:
    """The backend the ``CAIRN_TIERED_S3_*`` variables describe.

    Raises:
        ValueError: the bucket is unset, or ``CAIRN_TIERED_S3_COMPOSE`` is not a boolean.
        S3RequestError: boto3 is not installed.
    """
    values = {name: env.get(name, default).strip() for name, (default, _) in S3_VARIABLES.items()}
    if not values["CAIRN_TIERED_S3_BUCKET"]:
        raise ValueError("CAIRN_TIERED_S3_BUCKET must name a bucket for the s3 tier backend")
    compose = values["CAIRN_TIERED_S3_COMPOSE"].lower()
    if compose not in ("true", "false", "1", "0"):
        raise ValueError(f"CAIRN_TIERED_S3_COMPOSE must be true or false, got {compose!r}")
    return S3Backend(
        values["CAIRN_TIERED_S3_BUCKET"],
        values["CAIRN_TIERED_S3_PREFIX"],
        cluster=cluster,
        broker=broker,
        endpoint_url=values["CAIRN_TIERED_S3_ENDPOINT"] or None,
        region=values["CAIRN_TIERED_S3_REGION"],
        access_key_id=values["CAIRN_TIERED_S3_ACCESS_KEY_ID"] or None,
        secret_access_key=values["CAIRN_TIERED_S3_SECRET_ACCESS_KEY"] or None,
        compose_on_seal=compose in ("true", "1"),
    )


def _make_client(
    endpoint_url: str | None,
    region: str,
    credentials: tuple[str | None, str | None],
    max_attempts: int,
    timeouts_s: tuple[float, float],
) -> S3Client:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise S3RequestError("the S3 tiered backend needs boto3: pip install 'cairn[s3]'") from None
    config = Config(
        retries={"max_attempts": max_attempts, "mode": "standard"},
        connect_timeout=timeouts_s[0],
        read_timeout=timeouts_s[1],
        s3={"addressing_style": "path"} if endpoint_url else None,
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=credentials[0],
        aws_secret_access_key=credentials[1],
        config=config,
    )


def _translate_error(exc: Exception, context: str) -> S3BackendError | None:
    """The :class:`S3BackendError` for a botocore exception, or None if ``exc`` is not one."""
    from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code", "?")
        message = error.get("Message", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        text = f"{context} failed: {code} (HTTP {status}) {message}".rstrip()
        if status >= 500 or code in _TRANSIENT_CODES:
            return S3UnavailableError(text, code)
        if code == "NoSuchBucket":
            return S3RequestError(f"{context} failed: the bucket does not exist", code)
        return S3RequestError(text, code)
    if isinstance(exc, ConnectionError | HTTPClientError):
        return S3UnavailableError(f"{context} failed: S3 is unreachable ({exc})")
    if isinstance(exc, BotoCoreError):
        return S3RequestError(f"{context} failed: {exc}")
    return None
