"""The BigQuery REST endpoints ``google.cloud.bigquery.Client`` calls for CDC tables, over loopback HTTP.

``datasets.insert``/``get``, ``tables.insert``/``get``/``patch``/``delete`` (schema, primary key,
clustering, ``maxStaleness``; checked as :mod:`.state` describes; a patch may only add columns and
fails with 412 ``conditionNotMet`` when its ``If-Match`` etag is stale) and ``jobs.query`` for exactly one
statement: ``SELECT upsert_stream_apply_watermark FROM `p.d.INFORMATION_SCHEMA.TABLES` WHERE
table_name = @table_name``. Anything else answers 400/404 as BigQuery would for a bad request.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from .state import FakeError, FakeState

_BASE = "/bigquery/v2/projects/"
_WATERMARK_QUERY = re.compile(
    r"^\s*SELECT\s+upsert_stream_apply_watermark\s+FROM\s+`([^`.]+)\.([^`.]+)\.INFORMATION_SCHEMA\.TABLES`"
    r"\s+WHERE\s+table_name\s*=\s*@table_name\s*$",
    re.IGNORECASE,
)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: int, body: dict[str, Any] | None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            raise FakeError(400, "parseError", "request body is not JSON") from None
        if not isinstance(body, dict):
            raise FakeError(400, "invalid", "request body must be a JSON object")
        return body

    def _route(self, method: str) -> None:
        path = urlsplit(self.path).path
        try:
            if not path.startswith(_BASE):
                raise FakeError(404, "notFound", f"unknown path {path}")
            parts = [unquote(p) for p in path[len(_BASE) :].split("/")]
            self._send(200, self._dispatch(method, parts))
        except FakeError as exc:
            status = {
                400: "INVALID_ARGUMENT",
                404: "NOT_FOUND",
                409: "ALREADY_EXISTS",
                412: "FAILED_PRECONDITION",
            }.get(exc.status, "UNKNOWN")
            self._send(
                exc.status,
                {
                    "error": {
                        "code": exc.status,
                        "message": exc.message,
                        "status": status,
                        "errors": [{"reason": exc.reason, "message": exc.message}],
                    }
                },
            )

    def _dispatch(self, method: str, parts: list[str]) -> dict[str, Any] | None:
        state = self.server.state
        match (method, parts):
            case ("POST", [project, "datasets"]):
                body = self._body()
                dataset = (body.get("datasetReference") or {}).get("datasetId")
                state.create_dataset(project, dataset)
                return {
                    "kind": "bigquery#dataset",
                    "id": f"{project}:{dataset}",
                    "datasetReference": {"projectId": project, "datasetId": dataset},
                }
            case ("GET", [project, "datasets", dataset]):
                if (project, dataset) not in state.datasets:
                    raise FakeError(404, "notFound", f"Not found: Dataset {project}:{dataset}")
                return {
                    "kind": "bigquery#dataset",
                    "id": f"{project}:{dataset}",
                    "datasetReference": {"projectId": project, "datasetId": dataset},
                }
            case ("POST", [project, "datasets", dataset, "tables"]):
                return state.create_table(project, dataset, self._body()).resource()
            case ("GET", [project, "datasets", dataset, "tables", table]):
                return state.table(project, dataset, table).resource()
            case ("PATCH" | "PUT", [project, "datasets", dataset, "tables", table]):
                if_match = self.headers.get("If-Match")
                return state.patch_table(project, dataset, table, self._body(), if_match).resource()
            case ("DELETE", [project, "datasets", dataset, "tables", table]):
                with state.lock:
                    state.table(project, dataset, table)
                    del state.tables[(project, dataset, table)]
                return None
            case ("POST", [project, "queries"]):
                return self._query(project, self._body())
        raise FakeError(404, "notFound", f"{method} /{'/'.join(parts)} is not served by this fake")

    def _query(self, project: str, body: dict[str, Any]) -> dict[str, Any]:
        match = _WATERMARK_QUERY.match(str(body.get("query", "")))
        if not match or body.get("useLegacySql") not in (False, None):
            raise FakeError(
                400,
                "invalidQuery",
                "this fake answers only the upsert_stream_apply_watermark query "
                "on INFORMATION_SCHEMA.TABLES with a @table_name parameter",
            )
        table_name = next(
            (
                p["parameterValue"]["value"]
                for p in body.get("queryParameters") or []
                if p.get("name") == "table_name"
            ),
            None,
        )
        if table_name is None:
            raise FakeError(400, "invalidQuery", "Query parameter 'table_name' not found")
        rows = []
        with self.server.state.lock:
            table = self.server.state.tables.get((match.group(1), match.group(2), table_name))
            if table is not None:
                micros = table.apply_watermark_us
                as_int = (body.get("formatOptions") or {}).get("useInt64Timestamp")
                value = None if micros is None else (str(micros) if as_int else repr(micros / 1e6))
                rows.append({"f": [{"v": value}]})
        job_id = uuid.uuid4().hex
        return {
            "kind": "bigquery#queryResponse",
            "schema": {
                "fields": [{"name": "upsert_stream_apply_watermark", "type": "TIMESTAMP", "mode": "NULLABLE"}]
            },
            "jobReference": {"projectId": project, "jobId": job_id, "location": "US"},
            "totalRows": str(len(rows)),
            "rows": rows,
            "jobComplete": True,
            "cacheHit": False,
            "totalBytesProcessed": "0",
        }

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], state: FakeState) -> None:
        super().__init__(address, _Handler)
        self.state = state


class RestServer:
    """Serves the REST side on ``127.0.0.1``; ``endpoint`` is the ``api_endpoint`` for the client."""

    def __init__(self, state: FakeState) -> None:
        self.state = state
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._server = _Server((host, port), self.state)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="bigquery-fake-rest", daemon=True
        )
        self._thread.start()
        return self.endpoint

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
