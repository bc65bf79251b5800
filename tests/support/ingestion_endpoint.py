"""A local stand-in for the Azure Monitor Logs Ingestion API, over HTTPS with a test CA.

No emulator of this service exists, so this endpoint is the one mocked part of these tests. It
answers the call ``azure-monitor-ingestion``'s ``LogsIngestionClient.upload`` makes, as documented
(learn.microsoft.com, "Logs Ingestion API in Azure Monitor", REST API call):

``POST {endpoint}/dataCollectionRules/{immutable id}/streams/{stream}?api-version=2023-01-01`` with
``Authorization: Bearer <token for https://monitor.azure.com>``, ``Content-Type: application/json``,
``Content-Encoding: gzip`` and a JSON array of rows; at most 1 MB a call; ``204 No Content`` when
accepted. Refusals are JSON ``{"error": {"code", "message"}}``: 401 for a wrong token, 404 for an
unknown rule or stream, 413 for a body over 1 MB, 400 for rows that are not objects of the stream's
columns. Other replies can be scripted (``script(Reply(429, {"Retry-After": "2"}))``).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.receiver import Receiver, Reply, Request, TlsFiles

API_VERSION = "2023-01-01"
MAX_BODY = 1_000_000


@dataclass
class Upload:
    """One accepted or refused call, with its rows decoded."""

    request: Request
    rows: list[dict[str, Any]] = field(default_factory=list)
    compressed_bytes: int = 0
    json_bytes: int = 0


class IngestionEndpoint(Receiver):
    def __init__(self, tls: TlsFiles, *, rule_id: str, stream: str, columns: dict[str, str],
                 token: str) -> None:
        super().__init__(tls=tls, path="/dataCollectionRules")
        self.rule_id = rule_id
        self.stream = stream
        self.columns = columns
        self.token = token
        self.uploads: list[Upload] = []
        self._refuse: Callable[[dict[str, Any]], bool] | None = None

    def rows(self) -> list[dict[str, Any]]:
        """Rows of the accepted calls, in arrival order."""
        return [row for u in self.uploads if u.request.status == 204 for row in u.rows]

    def _handle(self, request: Request) -> Reply:
        parts = urlsplit(request.path)
        if request.method != "POST":
            return _error(404, "NotFound", f"{request.method} {parts.path}")
        upload = Upload(request)
        self.uploads.append(upload)
        expected = f"/dataCollectionRules/{self.rule_id}/streams/{self.stream}"
        if parse_qs(parts.query).get("api-version") != [API_VERSION]:
            return _error(400, "InvalidApiVersion", f"api-version must be {API_VERSION}")
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return _error(401, "InvalidToken", "the bearer token is missing or not valid")
        if parts.path != expected:
            return _error(404, "NotFound", "no such data collection rule or stream")
        if len(request.body) > MAX_BODY:
            return _error(413, "ContentLengthLimitExceeded", "maximum allowed is 1 MB")
        if request.headers.get("content-type", "").split(";")[0] != "application/json":
            return _error(415, "UnsupportedMediaType", "Content-Type must be application/json")
        body = request.body
        upload.compressed_bytes = len(body)
        if request.headers.get("content-encoding") == "gzip":
            try:
                body = gzip.decompress(body)
            except OSError:
                return _error(400, "InvalidContentEncoding", "the body is not gzip")
        upload.json_bytes = len(body)
        if len(body) > MAX_BODY:
            return _error(413, "ContentLengthLimitExceeded", "maximum allowed is 1 MB uncompressed")
        try:
            rows = json.loads(body)
        except ValueError:
            return _error(400, "InvalidJson", "the body is not JSON")
        problem = self._rows_problem(rows)
        if problem:
            return _error(400, "InvalidDataFormat", problem)
        upload.rows = rows
        bad = [i for i, row in enumerate(rows) if self._refuse is not None and self._refuse(row)]
        if bad:
            return _error(400, "InvalidDataFormat", f"row {bad[0]}: TimeGenerated is not a valid datetime")
        with self._lock:
            if self._script:
                return self._script.popleft()
        return Reply(204)

    def refuse_rows(self, predicate: Callable[[dict[str, Any]], bool]) -> None:
        """Answer 400 to any call holding a row for which ``predicate`` holds."""
        self._refuse = predicate

    def _rows_problem(self, rows: Any) -> str:
        if not isinstance(rows, list) or not rows:
            return "the body must be a non-empty JSON array"
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                return f"row {i} is not an object"
            unknown = sorted(set(row) - set(self.columns))
            if unknown:
                return f"row {i}: columns not in the stream: {unknown}"
            for name, value in row.items():
                if value is not None and not _fits(value, self.columns[name]):
                    return f"row {i}: {name} is not of type {self.columns[name]}"
        return ""


def _fits(value: Any, kind: str) -> bool:
    if kind in ("string", "datetime"):
        return isinstance(value, str)
    if kind in ("int", "long"):
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "real":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    return True  # dynamic


def _error(status: int, code: str, message: str) -> Reply:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return Reply(status, {"Content-Type": "application/json"}, body)
