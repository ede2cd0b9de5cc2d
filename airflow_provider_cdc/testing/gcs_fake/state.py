"""The fake's buckets and objects, with Cloud Storage's generations, preconditions and listing.

Every write gives the object a new ``generation`` (strictly increasing across the fake) and
``metageneration`` 1; a metadata patch increments ``metageneration``. Preconditions follow the
documentation: ``ifGenerationMatch=0`` means the object must not exist, ``ifGenerationMatch=N``
that its live generation is ``N``, ``ifGenerationNotMatch``/``ifMetagenerationMatch``/
``ifMetagenerationNotMatch`` likewise; a failed one is :class:`GcsError` 412 ``conditionNotMet``
(304 for a read whose ``NotMatch`` condition fails). Checks and writes happen under one lock, so
two writers racing on ``ifGenerationMatch`` see exactly one winner, and listing is strongly
consistent. Only the live generation is kept unless a bucket has versioning enabled.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import google_crc32c

#: The page size Cloud Storage uses when ``maxResults``/``max-keys`` is not given.
DEFAULT_PAGE_SIZE = 1000


class GcsError(Exception):
    """An error Cloud Storage would answer with: HTTP ``status``, the JSON API's ``reason`` and,
    where it is not implied by those, the XML API's ``xml_code``."""

    def __init__(self, status: int, reason: str, message: str, xml_code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.xml_code = xml_code


@dataclass(frozen=True)
class Preconditions:
    """The generation and metageneration conditions of one request (``None``: not given)."""

    if_generation_match: int | None = None
    if_generation_not_match: int | None = None
    if_metageneration_match: int | None = None
    if_metageneration_not_match: int | None = None

    def check(self, current: StoredObject | None, *, read: bool = False) -> None:
        """Raise 412 (or 304 for a read's ``NotMatch``) unless every given condition holds."""
        generation = current.generation if current is not None else 0
        if self.if_generation_match is not None and generation != self.if_generation_match:
            raise _precondition_failed()
        if self.if_metageneration_match is not None and (
            current is None or current.metageneration != self.if_metageneration_match
        ):
            raise _precondition_failed()
        not_match = (
            self.if_generation_not_match is not None and generation == self.if_generation_not_match
        ) or (
            self.if_metageneration_not_match is not None
            and current is not None
            and current.metageneration == self.if_metageneration_not_match
        )
        if not_match:
            if read:
                raise GcsError(304, "notModified", "Not Modified")
            raise _precondition_failed()


def _precondition_failed() -> GcsError:
    return GcsError(412, "conditionNotMet", "At least one of the pre-conditions you specified did not hold.")


@dataclass
class StoredObject:
    """One generation of an object."""

    bucket: str
    name: str
    data: bytes
    generation: int
    metageneration: int
    created: datetime
    updated: datetime
    content_type: str = "application/octet-stream"
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def md5_base64(self) -> str:
        return base64.b64encode(hashlib.md5(self.data).digest()).decode()

    @property
    def md5_hex(self) -> str:
        return hashlib.md5(self.data).hexdigest()

    @property
    def crc32c_base64(self) -> str:
        return base64.b64encode(google_crc32c.value(self.data).to_bytes(4, "big")).decode()

    @property
    def etag(self) -> str:
        """The JSON API's etag: changes with every generation and metageneration."""
        return base64.b64encode(f"{self.generation}/{self.metageneration}".encode()).decode()

    def x_goog_hash(self) -> str:
        return f"crc32c={self.crc32c_base64},md5={self.md5_base64}"

    def resource(self) -> dict[str, Any]:
        """The JSON API's object resource."""
        return {
            "kind": "storage#object",
            "id": f"{self.bucket}/{self.name}/{self.generation}",
            "name": self.name,
            "bucket": self.bucket,
            "generation": str(self.generation),
            "metageneration": str(self.metageneration),
            "contentType": self.content_type,
            "storageClass": "STANDARD",
            "size": str(self.size),
            "md5Hash": self.md5_base64,
            "crc32c": self.crc32c_base64,
            "etag": self.etag,
            "timeCreated": rfc3339(self.created),
            "updated": rfc3339(self.updated),
            "timeStorageClassUpdated": rfc3339(self.created),
            **({"metadata": dict(self.metadata)} if self.metadata else {}),
        }


@dataclass
class Bucket:
    name: str
    created: datetime
    versioning: bool = False
    live: dict[str, StoredObject] = field(default_factory=dict)
    #: Noncurrent generations by name (only with ``versioning``), oldest first.
    noncurrent: dict[str, list[StoredObject]] = field(default_factory=dict)
    _sorted: list[str] = field(default_factory=list)

    def resource(self) -> dict[str, Any]:
        return {
            "kind": "storage#bucket",
            "id": self.name,
            "name": self.name,
            "location": "US",
            "storageClass": "STANDARD",
            "metageneration": "1",
            "timeCreated": rfc3339(self.created),
            "updated": rfc3339(self.created),
            "versioning": {"enabled": self.versioning},
            "etag": "CAE=",
        }


@dataclass
class ListPage:
    """One page of a listing: objects, prefixes and the token for the next page (or ``None``)."""

    objects: list[StoredObject]
    prefixes: list[str]
    next_token: str | None


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class FakeState:
    """Buckets and objects under one lock."""

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self.lock = threading.RLock()
        self.clock = clock or (lambda: datetime.now(timezone.utc))
        self.buckets: dict[str, Bucket] = {}
        self._last_generation = 0
        self._rendezvous: dict[tuple[str, str], tuple[threading.Barrier, int]] = {}

    def rendezvous(self, bucket: str, name: str, parties: int, timeout: float = 60.0) -> None:
        """Hold the next ``parties`` writes of ``bucket/name`` until all of them have arrived, then
        let them race for the lock (how a test makes two writers commit the same version)."""
        with self.lock:
            self._rendezvous[(bucket, name)] = (threading.Barrier(parties, timeout=timeout), parties)

    def _meet(self, bucket: str, name: str) -> None:
        with self.lock:
            waiting = self._rendezvous.get((bucket, name))
            if waiting is None:
                return
            barrier, expected = waiting
            if expected <= 1:
                del self._rendezvous[(bucket, name)]
            else:
                self._rendezvous[(bucket, name)] = (barrier, expected - 1)
        barrier.wait()

    def _next_generation(self) -> int:
        self._last_generation = max(self._last_generation + 1, time.time_ns() // 1000)
        return self._last_generation

    def create_bucket(self, name: str, *, versioning: bool = False, exist_ok: bool = False) -> Bucket:
        with self.lock:
            if name in self.buckets:
                if exist_ok:
                    return self.buckets[name]
                raise GcsError(
                    409,
                    "conflict",
                    "Your previous request to create the named bucket succeeded and you already own it.",
                )
            bucket = self.buckets[name] = Bucket(name, self.clock(), versioning)
            return bucket

    def bucket(self, name: str) -> Bucket:
        with self.lock:
            bucket = self.buckets.get(name)
            if bucket is None:
                raise GcsError(404, "notFound", "The specified bucket does not exist.", "NoSuchBucket")
            return bucket

    def delete_bucket(self, name: str) -> None:
        with self.lock:
            if self.bucket(name).live:
                raise GcsError(409, "conflict", "The bucket you tried to delete is not empty.")
            del self.buckets[name]

    def get(self, bucket: str, name: str, generation: int | None = None) -> StoredObject:
        """The live object, or the given generation of it; 404 if there is none."""
        with self.lock:
            b = self.bucket(bucket)
            current = b.live.get(name)
            if generation is None or (current is not None and current.generation == generation):
                if current is None:
                    raise _no_such_object(bucket, name)
                return current
            for old in b.noncurrent.get(name, ()):
                if old.generation == generation:
                    return old
            raise _no_such_object(bucket, name)

    def peek(self, bucket: str, name: str) -> StoredObject | None:
        with self.lock:
            return self.bucket(bucket).live.get(name)

    def read(self, bucket: str, name: str, generation: int | None, conditions: Preconditions) -> StoredObject:
        """``get`` after checking the read's preconditions against the live object."""
        with self.lock:
            conditions.check(self.bucket(bucket).live.get(name), read=True)
            return self.get(bucket, name, generation)

    def put(
        self,
        bucket: str,
        name: str,
        data: bytes,
        conditions: Preconditions = Preconditions(),
        content_type: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> StoredObject:
        """Write a new generation of ``name`` if ``conditions`` hold."""
        self._meet(bucket, name)
        return self._put(bucket, name, data, conditions, content_type, metadata)

    def _put(
        self,
        bucket: str,
        name: str,
        data: bytes,
        conditions: Preconditions,
        content_type: str | None,
        metadata: dict[str, str] | None,
    ) -> StoredObject:
        if not name:
            raise GcsError(400, "required", "Required")
        with self.lock:
            b = self.bucket(bucket)
            current = b.live.get(name)
            conditions.check(current)
            now = self.clock()
            obj = StoredObject(
                bucket,
                name,
                bytes(data),
                self._next_generation(),
                1,
                now,
                now,
                content_type or "application/octet-stream",
                dict(metadata or {}),
            )
            if current is None:
                bisect.insort(b._sorted, name)
            elif b.versioning:
                b.noncurrent.setdefault(name, []).append(current)
            b.live[name] = obj
            return obj

    def patch(
        self, bucket: str, name: str, changes: dict[str, Any], conditions: Preconditions
    ) -> StoredObject:
        """Update metadata (``contentType``, ``metadata``); increments ``metageneration``."""
        with self.lock:
            current = self.get(bucket, name)
            conditions.check(current)
            if "contentType" in changes:
                current.content_type = changes["contentType"] or "application/octet-stream"
            if "metadata" in changes:
                merged = dict(current.metadata)
                for key, value in (changes["metadata"] or {}).items():
                    if value is None:
                        merged.pop(key, None)
                    else:
                        merged[key] = str(value)
                current.metadata = merged
            current.metageneration += 1
            current.updated = self.clock()
            return current

    def delete(self, bucket: str, name: str, generation: int | None, conditions: Preconditions) -> None:
        """Delete the live object (or one noncurrent ``generation``) if ``conditions`` hold."""
        with self.lock:
            b = self.bucket(bucket)
            current = b.live.get(name)
            if generation is not None and (current is None or current.generation != generation):
                olds = b.noncurrent.get(name, [])
                for i, old in enumerate(olds):
                    if old.generation == generation:
                        del olds[i]
                        return
                raise _no_such_object(bucket, name)
            if current is None:
                raise _no_such_object(bucket, name)
            conditions.check(current)
            del b.live[name]
            del b._sorted[bisect.bisect_left(b._sorted, name)]
            if b.versioning:
                b.noncurrent.setdefault(name, []).append(current)

    def copy(
        self,
        src_bucket: str,
        src_name: str,
        dst_bucket: str,
        dst_name: str,
        src_generation: int | None = None,
        conditions: Preconditions = Preconditions(),
        source_conditions: Preconditions = Preconditions(),
    ) -> StoredObject:
        """Copy one object to another name, atomically with the destination's preconditions."""
        self._meet(dst_bucket, dst_name)
        with self.lock:
            source_conditions.check(self.bucket(src_bucket).live.get(src_name))
            src = self.get(src_bucket, src_name, src_generation)
            return self._put(dst_bucket, dst_name, src.data, conditions, src.content_type, src.metadata)

    def list(
        self,
        bucket: str,
        *,
        prefix: str = "",
        delimiter: str = "",
        start_offset: str = "",
        end_offset: str = "",
        start_after: str | None = None,
        page_token: str | None = None,
        max_results: int | None = None,
        include_trailing_delimiter: bool = False,
        versions: bool = False,
    ) -> ListPage:
        """One page of names in lexicographic order, as ``objects.list`` returns them.

        ``start_offset`` is inclusive and ``end_offset`` exclusive (JSON API); ``start_after`` is
        the XML API's exclusive start. With ``delimiter``, names with the delimiter after ``prefix``
        collapse into one prefix each. ``max_results`` counts objects and prefixes together.
        """
        limit = DEFAULT_PAGE_SIZE if not max_results or max_results <= 0 else max_results
        after_key, after_is_prefix = _decode_token(page_token) if page_token else (None, False)
        with self.lock:
            b = self.bucket(bucket)
            names = b._sorted
            if versions:
                names = sorted(set(names) | {n for n, olds in b.noncurrent.items() if olds})
            lo = max(prefix, start_offset)
            start = bisect.bisect_left(names, lo)
            if start_after is not None:
                start = max(start, bisect.bisect_right(names, start_after))
            if after_key is not None:
                start = max(start, bisect.bisect_right(names, after_key))
            objects: list[StoredObject] = []
            prefixes: list[str] = []
            last: tuple[str, bool] | None = None
            i = start
            while i < len(names):
                name = names[i]
                if not name.startswith(prefix) or (end_offset and name >= end_offset):
                    break
                if after_is_prefix and after_key is not None and name.startswith(after_key):
                    i += 1
                    continue
                if len(objects) + len(prefixes) >= limit:
                    assert last is not None
                    return ListPage(objects, prefixes, _encode_token(*last))
                rest = name[len(prefix) :]
                cut = rest.find(delimiter) if delimiter else -1
                if cut >= 0:
                    collapsed = prefix + rest[: cut + len(delimiter)]
                    prefixes.append(collapsed)
                    if include_trailing_delimiter and collapsed in b.live:
                        objects.append(b.live[collapsed])
                    last = (collapsed, True)
                    i = bisect.bisect_left(names, collapsed + "\U0010ffff", i)
                    while i < len(names) and names[i].startswith(collapsed):
                        i += 1
                    continue
                objects.extend(self._generations(b, name, versions))
                last = (name, False)
                i += 1
            return ListPage(objects, prefixes, None)

    @staticmethod
    def _generations(b: Bucket, name: str, versions: bool) -> Iterator[StoredObject]:
        if versions:
            yield from b.noncurrent.get(name, ())
        if name in b.live:
            yield b.live[name]


def _no_such_object(bucket: str, name: str) -> GcsError:
    return GcsError(404, "notFound", f"No such object: {bucket}/{name}")


def _encode_token(key: str, is_prefix: bool) -> str:
    return base64.urlsafe_b64encode(json.dumps([key, is_prefix]).encode()).decode()


def _decode_token(token: str) -> tuple[str, bool]:
    try:
        key, is_prefix = json.loads(base64.urlsafe_b64decode(token.encode()))
        return str(key), bool(is_prefix)
    except (ValueError, TypeError):
        raise GcsError(400, "invalid", "Invalid page token.") from None
