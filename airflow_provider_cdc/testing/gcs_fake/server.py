"""Cloud Storage's JSON and XML APIs over loopback HTTP, on one port.

JSON API (``google-cloud-storage``, pyarrow's ``GcsFileSystem``): ``/storage/v1/b[/{bucket}]``
(buckets insert/get/list/delete), ``/storage/v1/b/{bucket}/o`` (list with ``prefix``,
``delimiter``, ``startOffset``, ``endOffset``, ``pageToken``, ``maxResults``,
``includeTrailingDelimiter``, ``versions``), object get/patch/delete (``alt=media`` downloads with
``Range``, also under ``/download``), ``rewriteTo``/``copyTo``, and uploads under ``/upload`` with
``uploadType=media``, ``multipart`` and ``resumable`` (chunks with ``Content-Range``, 308 with
``Range`` until the last one, status queries with ``bytes */N``). Preconditions are the
``ifGenerationMatch`` family of query parameters; errors have the JSON API's error body.

XML API (the ``object_store`` crate under delta-rs): ``GET``/``HEAD``/``PUT``/``DELETE``
``/{bucket}/{object}`` (``Range``, ``generation=``, ``x-goog-if-generation-match`` and
``x-goog-if-metageneration-match``, ``x-goog-copy-source`` copies, ``x-goog-meta-*``), ``GET
/{bucket}?list-type=2`` (``prefix``, ``delimiter``, ``start-after``, ``continuation-token``,
``max-keys``; ``marker`` without ``list-type``) and multipart uploads (``POST ?uploads``, ``PUT
?partNumber=&uploadId=``, ``POST ?uploadId=``, ``DELETE ?uploadId=``). Errors have the XML API's
``<Error><Code>`` body.

Any bearer token, or none, is accepted; the ``Authorization`` header is never recorded.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from .state import FakeState, GcsError, Preconditions, StoredObject

_JSON_ERROR_STATUS = {
    400: "INVALID_ARGUMENT",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    416: "OUT_OF_RANGE",
}
_XML_ERROR_CODE = {
    (400, "invalid"): "InvalidArgument",
    (404, "notFound"): "NoSuchKey",
    (409, "conflict"): "BucketAlreadyOwnedByYou",
    (412, "conditionNotMet"): "PreconditionFailed",
    (416, "requestedRangeNotSatisfiable"): "InvalidRange",
}
_CONTENT_RANGE = re.compile(r"^bytes (?:(\d+)-(\d+)|\*)/(\d+|\*)$")
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
#: Query parameters and XML headers whose values are recorded with each request.
_RECORDED_HEADERS = ("x-goog-if-generation-match", "x-goog-if-metageneration-match", "x-goog-copy-source")


@dataclass
class Request:
    """One request as the fake saw it (``path`` percent-decoded; ``api`` is ``"json"`` or ``"xml"``).

    Only the ``x-goog-if-*`` and ``x-goog-copy-source`` headers are kept, never credentials."""

    api: str
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    #: The status the fake answered with (0 while the request is being served).
    status: int = 0


@dataclass
class _Upload:
    bucket: str
    name: str
    conditions: Preconditions
    content_type: str | None
    metadata: dict[str, str]
    data: bytearray = field(default_factory=bytearray)
    parts: dict[int, bytes] = field(default_factory=dict)
    result: StoredObject | None = None


def _int(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise GcsError(400, "invalid", f"Invalid value: {value}") from None


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        return

    # -- plumbing ---------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(
        self,
        status: int,
        body: bytes = b"",
        content_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._record.status = status
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, body: dict[str, Any] | None, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self._send(status, data, "application/json; charset=UTF-8" if data else None, headers)

    def _handle(self) -> None:
        split = urlsplit(self.path)
        self._path = split.path
        self._query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        api = "json" if split.path.startswith(("/storage/v1/", "/upload/", "/download/")) else "xml"
        self._record = Request(
            api,
            self.command,
            unquote(split.path),
            dict(self._query),
            {k: self.headers[k] for k in _RECORDED_HEADERS if k in self.headers},
        )
        self.server.record(self._record)
        body = self._read_body() if self.command in ("PUT", "POST", "PATCH") else b""
        try:
            if api == "json":
                self._json_api(body)
            else:
                self._xml_api(body)
        except GcsError as exc:
            if exc.status == 304:
                self._send(304)
            elif api == "json":
                error = {"domain": "global", "reason": exc.reason, "message": exc.message}
                if exc.status == 412:
                    error.update(locationType="header", location="If-Match")
                self._json(
                    exc.status,
                    {
                        "error": {
                            "code": exc.status,
                            "message": exc.message,
                            "errors": [error],
                            "status": _JSON_ERROR_STATUS.get(exc.status, "UNKNOWN"),
                        }
                    },
                )
            else:
                code = exc.xml_code or _XML_ERROR_CODE.get((exc.status, exc.reason), "InvalidRequest")
                xml = (
                    "<?xml version='1.0' encoding='UTF-8'?>"
                    f"<Error><Code>{code}</Code><Message>{escape(exc.message)}</Message></Error>"
                )
                self._send(exc.status, xml.encode(), "application/xml; charset=UTF-8")

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _handle

    def _media(self, obj: StoredObject, extra: dict[str, str] | None = None) -> None:
        """Send the object's bytes (or the ``Range`` of them) with Cloud Storage's headers."""
        headers = {
            "ETag": f'"{obj.md5_hex}"',
            "Last-Modified": format_datetime(obj.updated.astimezone(timezone.utc), usegmt=True),
            "x-goog-generation": str(obj.generation),
            "x-goog-metageneration": str(obj.metageneration),
            "x-goog-stored-content-length": str(obj.size),
            "x-goog-stored-content-encoding": "identity",
            "x-goog-hash": obj.x_goog_hash(),
            "Accept-Ranges": "bytes",
            **{f"x-goog-meta-{k}": v for k, v in obj.metadata.items()},
            **(extra or {}),
        }
        data = obj.data
        status = 200
        spec = self.headers.get("Range")
        match = _RANGE.match(spec.strip()) if spec else None
        if match and (match.group(1) or match.group(2)):
            first, last = match.group(1), match.group(2)
            if first:
                start = int(first)
                end = min(int(last), obj.size - 1) if last else obj.size - 1
            else:
                start, end = max(obj.size - int(last), 0), obj.size - 1
            if start >= obj.size or start > end:
                if not (obj.size == 0 and not first):
                    raise GcsError(
                        416,
                        "requestedRangeNotSatisfiable",
                        "The requested range cannot be satisfied.",
                    )
            else:
                data = obj.data[start : end + 1]
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end}/{obj.size}"
        self._send(status, data, obj.content_type, headers)

    def _json_conditions(self) -> Preconditions:
        q = self._query
        return Preconditions(
            _int(q.get("ifGenerationMatch")),
            _int(q.get("ifGenerationNotMatch")),
            _int(q.get("ifMetagenerationMatch")),
            _int(q.get("ifMetagenerationNotMatch")),
        )

    def _source_conditions(self) -> Preconditions:
        q = self._query
        return Preconditions(
            _int(q.get("ifSourceGenerationMatch")),
            _int(q.get("ifSourceGenerationNotMatch")),
            _int(q.get("ifSourceMetagenerationMatch")),
            _int(q.get("ifSourceMetagenerationNotMatch")),
        )

    # -- JSON API ---------------------------------------------------------------------------

    def _json_api(self, body: bytes) -> None:
        state = self.server.state
        path, method, q = self._path, self.command, self._query
        if path.startswith("/upload/storage/v1/b/"):
            self._json_upload(path[len("/upload/storage/v1/b/") :], body)
            return
        download = path.startswith("/download/")
        if download:
            path = path[len("/download") :]
        rest = path[len("/storage/v1/") :]
        if rest == "b":
            if method == "GET":
                items = [b.resource() for _, b in sorted(state.buckets.items())]
                self._json(200, {"kind": "storage#buckets", "items": items})
                return
            if method == "POST":
                spec = json.loads(body or b"{}")
                versioning = bool((spec.get("versioning") or {}).get("enabled"))
                self._json(200, state.create_bucket(str(spec.get("name")), versioning=versioning).resource())
                return
        if not rest.startswith("b/"):
            raise GcsError(404, "notFound", f"{method} {path} is not served by this fake")
        bucket, _, rest = rest[2:].partition("/")
        bucket = unquote(bucket)
        if rest == "":
            if method == "GET":
                self._json(200, state.bucket(bucket).resource())
            elif method == "DELETE":
                state.delete_bucket(bucket)
                self._json(204, None)
            elif method == "PATCH":
                spec = json.loads(body or b"{}")
                with state.lock:
                    b = state.bucket(bucket)
                    if "versioning" in spec:
                        b.versioning = bool((spec["versioning"] or {}).get("enabled"))
                    self._json(200, b.resource())
            else:
                raise GcsError(405, "invalid", "Method not allowed")
            return
        if rest == "o":
            if method != "GET":
                raise GcsError(405, "invalid", "Method not allowed")
            page = state.list(
                bucket,
                prefix=q.get("prefix", ""),
                delimiter=q.get("delimiter", ""),
                start_offset=q.get("startOffset", ""),
                end_offset=q.get("endOffset", ""),
                page_token=q.get("pageToken") or None,
                max_results=_int(q.get("maxResults")),
                include_trailing_delimiter=q.get("includeTrailingDelimiter", "").lower() == "true",
                versions=q.get("versions", "").lower() == "true",
            )
            out: dict[str, Any] = {"kind": "storage#objects"}
            if page.objects:
                out["items"] = [o.resource() for o in page.objects]
            if page.prefixes:
                out["prefixes"] = page.prefixes
            if page.next_token:
                out["nextPageToken"] = page.next_token
            self._json(200, out)
            return
        if not rest.startswith("o/"):
            raise GcsError(404, "notFound", f"{method} {path} is not served by this fake")
        rest = rest[2:]
        for verb in ("/rewriteTo/b/", "/copyTo/b/"):
            if verb in rest and method == "POST":
                src_raw, _, dst = rest.partition(verb)
                dst_bucket, _, dst_name = dst.partition("/o/")
                obj = state.copy(
                    bucket,
                    unquote(src_raw),
                    unquote(dst_bucket),
                    unquote(dst_name),
                    _int(q.get("sourceGeneration")),
                    self._json_conditions(),
                    self._source_conditions(),
                )
                if verb == "/copyTo/b/":
                    self._json(200, obj.resource())
                else:
                    self._json(
                        200,
                        {
                            "kind": "storage#rewriteResponse",
                            "totalBytesRewritten": str(obj.size),
                            "objectSize": str(obj.size),
                            "done": True,
                            "resource": obj.resource(),
                        },
                    )
                return
        if rest.endswith("/compose") and method == "POST":
            self._compose(bucket, unquote(rest[: -len("/compose")]), body)
            return
        name = unquote(rest)
        generation = _int(q.get("generation"))
        if method == "GET":
            obj = state.read(bucket, name, generation, self._json_conditions())
            if download or q.get("alt") == "media":
                self._media(obj)
            else:
                self._json(200, obj.resource())
        elif method in ("PATCH", "PUT"):
            changes = json.loads(body or b"{}")
            self._json(200, state.patch(bucket, name, changes, self._json_conditions()).resource())
        elif method == "DELETE":
            state.delete(bucket, name, generation, self._json_conditions())
            self._json(204, None)
        else:
            raise GcsError(405, "invalid", "Method not allowed")

    def _compose(self, bucket: str, name: str, body: bytes) -> None:
        state = self.server.state
        spec = json.loads(body or b"{}")
        with state.lock:
            parts = [
                state.get(bucket, s["name"], _int(str(s["generation"])) if s.get("generation") else None)
                for s in spec.get("sourceObjects") or []
            ]
            destination = spec.get("destination") or {}
            obj = state._put(
                bucket,
                name,
                b"".join(p.data for p in parts),
                self._json_conditions(),
                destination.get("contentType"),
                destination.get("metadata"),
            )
        self._json(200, obj.resource())

    def _json_upload(self, rest: str, body: bytes) -> None:
        state, q, method = self.server.state, self._query, self.command
        bucket, _, _ = rest.partition("/")
        bucket = unquote(bucket)
        upload_id = q.get("upload_id")
        if upload_id is not None:
            self._resumable_chunk(upload_id, body)
            return
        if method != "POST":
            raise GcsError(405, "invalid", "Method not allowed")
        upload_type = q.get("uploadType", "")
        conditions = self._json_conditions()
        if upload_type == "media":
            obj = state.put(bucket, q.get("name", ""), body, conditions, self.headers.get("Content-Type"))
            self._json(200, obj.resource())
        elif upload_type == "multipart":
            spec, media, media_type = _split_related(self.headers.get("Content-Type", ""), body)
            obj = state.put(
                bucket,
                str(spec.get("name") or q.get("name", "")),
                media,
                conditions,
                spec.get("contentType") or media_type,
                spec.get("metadata"),
            )
            self._json(200, obj.resource())
        elif upload_type == "resumable":
            spec = json.loads(body or b"{}")
            state.bucket(bucket)
            upload = _Upload(
                bucket,
                str(spec.get("name") or q.get("name", "")),
                conditions,
                spec.get("contentType") or self.headers.get("X-Upload-Content-Type"),
                dict(spec.get("metadata") or {}),
            )
            if not upload.name:
                raise GcsError(400, "required", "Required")
            new_id = uuid.uuid4().hex
            with self.server.uploads_lock:
                self.server.uploads[new_id] = upload
            host = self.headers.get("Host") or "{}:{}".format(*self.server.server_address[:2])
            location = (
                f"http://{host}/upload/storage/v1/b/{quote(bucket, safe='')}/o"
                f"?uploadType=resumable&upload_id={new_id}"
            )
            self._send(200, b"", None, {"Location": location, "X-GUploader-UploadID": new_id})
        else:
            raise GcsError(400, "invalid", f"Invalid uploadType: {upload_type!r}")

    def _resumable_chunk(self, upload_id: str, body: bytes) -> None:
        with self.server.uploads_lock:
            upload = self.server.uploads.get(upload_id)
        if upload is None:
            raise GcsError(404, "notFound", "No such upload.")
        if self.command == "DELETE":
            with self.server.uploads_lock:
                self.server.uploads.pop(upload_id, None)
            self._send(499)
            return
        if upload.result is not None:
            self._json(200, upload.result.resource())
            return
        spec = self.headers.get("Content-Range")
        if spec is None:
            first, total = 0, len(body)
        else:
            match = _CONTENT_RANGE.match(spec.strip())
            if not match:
                raise GcsError(400, "invalid", f"Invalid Content-Range: {spec}")
            first = int(match.group(1)) if match.group(1) is not None else len(upload.data)
            total = None if match.group(3) == "*" else int(match.group(3))
        if first > len(upload.data):
            raise GcsError(400, "invalid", "Content-Range starts after the persisted bytes")
        upload.data.extend(body[len(upload.data) - first :])
        if total is not None and len(upload.data) >= total:
            if len(upload.data) != total:
                raise GcsError(400, "invalid", "Upload is larger than the declared size")
            upload.result = self.server.state.put(
                upload.bucket,
                upload.name,
                bytes(upload.data),
                upload.conditions,
                upload.content_type,
                upload.metadata,
            )
            upload.data = bytearray()
            self._json(200, upload.result.resource())
            return
        headers = {"Range": f"bytes=0-{len(upload.data) - 1}"} if upload.data else {}
        self._send(308, b"", None, headers)

    # -- XML API ----------------------------------------------------------------------------

    def _xml_conditions(self) -> Preconditions:
        h = self.headers
        return Preconditions(
            _int(h.get("x-goog-if-generation-match")),
            None,
            _int(h.get("x-goog-if-metageneration-match")),
            None,
        )

    def _xml_metadata(self) -> dict[str, str]:
        return {
            k[len("x-goog-meta-") :].lower(): v
            for k, v in self.headers.items()
            if k.lower().startswith("x-goog-meta-")
        }

    def _xml_api(self, body: bytes) -> None:
        state, q, method = self.server.state, self._query, self.command
        bucket_raw, _, name_raw = self._path.lstrip("/").partition("/")
        bucket, name = unquote(bucket_raw), unquote(name_raw)
        if not bucket:
            raise GcsError(400, "invalid", "listing buckets through the XML API is not served")
        if not name:
            if method == "GET":
                self._xml_list(bucket)
            elif method == "PUT":
                state.create_bucket(bucket)
                self._send(200)
            elif method == "DELETE":
                state.delete_bucket(bucket)
                self._send(204)
            else:
                state.bucket(bucket)
                self._send(200)
            return
        if method == "POST" and "uploads" in q:
            state.bucket(bucket)
            upload_id = uuid.uuid4().hex
            with self.server.uploads_lock:
                self.server.uploads[upload_id] = _Upload(
                    bucket,
                    name,
                    self._xml_conditions(),
                    self.headers.get("Content-Type"),
                    self._xml_metadata(),
                )
            self._xml(
                "InitiateMultipartUploadResult",
                f"<Bucket>{escape(bucket)}</Bucket><Key>{escape(name)}</Key><UploadId>{upload_id}</UploadId>",
            )
            return
        if "uploadId" in q:
            self._xml_multipart(q["uploadId"], body)
            return
        generation = _int(q.get("generation"))
        if method in ("GET", "HEAD"):
            obj = state.read(bucket, name, generation, self._xml_conditions())
            self._xml_etag_conditions(obj)
            self._media(obj)
        elif method == "PUT":
            source = self.headers.get("x-goog-copy-source")
            if source:
                src_bucket, _, src_name = unquote(source).lstrip("/").partition("/")
                src_name, _, src_generation = src_name.partition("#")
                obj = state.copy(
                    src_bucket,
                    src_name,
                    bucket,
                    name,
                    _int(self.headers.get("x-goog-copy-source-generation") or src_generation or None),
                    self._xml_conditions(),
                    Preconditions(_int(self.headers.get("x-goog-copy-source-if-generation-match"))),
                )
                self._xml(
                    "CopyObjectResult",
                    f'<LastModified>{obj.updated.isoformat()}</LastModified><ETag>"{obj.md5_hex}"</ETag>',
                    self._write_headers(obj),
                )
                return
            obj = state.put(
                bucket,
                name,
                body,
                self._xml_conditions(),
                self.headers.get("Content-Type"),
                self._xml_metadata(),
            )
            self._send(200, b"", None, self._write_headers(obj))
        elif method == "DELETE":
            state.delete(bucket, name, generation, self._xml_conditions())
            self._send(204)
        else:
            raise GcsError(405, "invalid", "Method not allowed")

    def _xml_etag_conditions(self, obj: StoredObject) -> None:
        etag = f'"{obj.md5_hex}"'
        if_match = self.headers.get("If-Match")
        if if_match and if_match.strip() not in ("*", etag, obj.md5_hex):
            raise GcsError(
                412, "conditionNotMet", "At least one of the pre-conditions you specified did not hold."
            )
        if_none_match = self.headers.get("If-None-Match")
        if if_none_match and if_none_match.strip() in ("*", etag, obj.md5_hex):
            raise GcsError(304, "notModified", "Not Modified")

    @staticmethod
    def _write_headers(obj: StoredObject) -> dict[str, str]:
        return {
            "ETag": f'"{obj.md5_hex}"',
            "x-goog-generation": str(obj.generation),
            "x-goog-metageneration": str(obj.metageneration),
            "x-goog-hash": obj.x_goog_hash(),
            "x-goog-stored-content-length": str(obj.size),
        }

    def _xml(self, root: str, inner: str, headers: dict[str, str] | None = None) -> None:
        xml = f"<?xml version='1.0' encoding='UTF-8'?><{root}>{inner}</{root}>"
        self._send(200, xml.encode(), "application/xml; charset=UTF-8", headers)

    def _xml_list(self, bucket: str) -> None:
        q = self._query
        v2 = q.get("list-type") == "2"
        start_after = q.get("start-after") if v2 else q.get("marker")
        token = q.get("continuation-token") if v2 else None
        page = self.server.state.list(
            bucket,
            prefix=q.get("prefix", ""),
            delimiter=q.get("delimiter", ""),
            start_after=start_after or None,
            page_token=token or None,
            max_results=_int(q.get("max-keys")),
        )
        parts = [
            f"<Name>{escape(bucket)}</Name><Prefix>{escape(q.get('prefix', ''))}</Prefix>",
            f"<KeyCount>{len(page.objects) + len(page.prefixes)}</KeyCount>" if v2 else "",
            f"<MaxKeys>{_int(q.get('max-keys')) or 1000}</MaxKeys>",
            f"<Delimiter>{escape(q['delimiter'])}</Delimiter>" if q.get("delimiter") else "",
            f"<IsTruncated>{'true' if page.next_token else 'false'}</IsTruncated>",
        ]
        for obj in page.objects:
            parts.append(
                f"<Contents><Key>{escape(obj.name)}</Key><Generation>{obj.generation}</Generation>"
                f"<MetaGeneration>{obj.metageneration}</MetaGeneration>"
                f"<LastModified>{obj.updated.astimezone(timezone.utc).strftime('%Y-%m-%dT%H:%M:%S.%f')[:-3]}Z"
                f'</LastModified><ETag>"{obj.md5_hex}"</ETag><Size>{obj.size}</Size></Contents>'
            )
        for prefix in page.prefixes:
            parts.append(f"<CommonPrefixes><Prefix>{escape(prefix)}</Prefix></CommonPrefixes>")
        if page.next_token:
            if v2:
                parts.append(f"<NextContinuationToken>{page.next_token}</NextContinuationToken>")
            else:
                last = max([o.name for o in page.objects] + page.prefixes)
                parts.append(f"<NextMarker>{escape(last)}</NextMarker>")
        self._xml("ListBucketResult", "".join(parts))

    def _xml_multipart(self, upload_id: str, body: bytes) -> None:
        with self.server.uploads_lock:
            upload = self.server.uploads.get(upload_id)
        if upload is None:
            raise GcsError(404, "notFound", "The requested upload was not found.")
        method = self.command
        if method == "PUT":
            number = _int(self._query.get("partNumber"))
            if number is None or not 1 <= number <= 10000:
                raise GcsError(400, "invalid", "Part number must be an integer between 1 and 10000")
            upload.parts[number] = body
            etag = hashlib.md5(body).hexdigest()
            self._send(200, b"", None, {"ETag": f'"{etag}"'})
        elif method == "DELETE":
            with self.server.uploads_lock:
                self.server.uploads.pop(upload_id, None)
            self._send(204)
        elif method == "POST":
            chosen = []
            for part in ElementTree.fromstring(body or b"<CompleteMultipartUpload/>").iter("Part"):
                number = int(part.findtext("PartNumber") or 0)
                etag = (part.findtext("ETag") or "").strip().strip('"')
                data = upload.parts.get(number)
                if data is None or hashlib.md5(data).hexdigest() != etag:
                    raise GcsError(400, "invalid", "One or more of the specified parts could not be found.")
                chosen.append(data)
            conditions = self._xml_conditions()
            if conditions == Preconditions():
                conditions = upload.conditions
            obj = self.server.state.put(
                upload.bucket,
                upload.name,
                b"".join(chosen),
                conditions,
                upload.content_type,
                upload.metadata,
            )
            with self.server.uploads_lock:
                self.server.uploads.pop(upload_id, None)
            self._xml(
                "CompleteMultipartUploadResult",
                f"<Location>/{escape(upload.bucket)}/{escape(upload.name)}</Location>"
                f"<Bucket>{escape(upload.bucket)}</Bucket><Key>{escape(upload.name)}</Key>"
                f'<ETag>"{obj.md5_hex}"</ETag>',
                self._write_headers(obj),
            )
        else:
            raise GcsError(405, "invalid", "Method not allowed")


def _split_related(content_type: str, body: bytes) -> tuple[dict[str, Any], bytes, str | None]:
    """The JSON metadata and the media of a ``multipart/related`` upload body."""
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if not match:
        raise GcsError(400, "invalid", "multipart upload without a boundary")
    delimiter = b"--" + match.group(1).encode()
    sections = [s for s in body.split(delimiter)[1:] if not s.startswith(b"--")]
    if len(sections) != 2:
        raise GcsError(400, "invalid", "multipart upload must have metadata and media parts")
    parsed = []
    for section in sections:
        head, _, payload = section.lstrip(b"\r\n").partition(b"\r\n\r\n")
        if payload.endswith(b"\r\n"):
            payload = payload[:-2]
        media_type = None
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.strip().lower() == "content-type":
                media_type = value.strip()
        parsed.append((payload, media_type))
    return json.loads(parsed[0][0] or b"{}"), parsed[1][0], parsed[1][1]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: FakeState, history: int) -> None:
        super().__init__(address, _Handler)
        self.state = state
        self.uploads: dict[str, _Upload] = {}
        self.uploads_lock = threading.Lock()
        self.requests: deque[Request] = deque(maxlen=history)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet when a client drops its connection; report anything else."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def record(self, request: Request) -> None:
        self.requests.append(request)


class GcsServer:
    """Serves both APIs on ``127.0.0.1``; ``endpoint`` is ``http://127.0.0.1:PORT``."""

    def __init__(self, state: FakeState, history: int = 10_000) -> None:
        self.state = state
        self._history = history
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._server = _Server((host, port), self.state, self._history)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="gcs-fake", daemon=True
        )
        self._thread.start()
        return self.endpoint

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def requests(self) -> list[Request]:
        assert self._server is not None, "not started"
        return list(self._server.requests)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
