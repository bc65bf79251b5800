"""The fleet page's routes (Starlette), added to the control API's app (api/server.py).

=========================  =========================================================  ==============
route                      what                                                       auth
=========================  =========================================================  ==============
``GET /``                  the page (static HTML; no build step, nothing from a CDN)  no
``GET /page/static/*``     its script, style sheet and icon                           no
``GET /page/v1/view``      the page's document (model.py), gzipped when asked         loopback or
                                                                                      bearer
=========================  =========================================================  ==============

Read-only viewing is open to clients on loopback (127.0.0.0/8, ::1) unless ``[web]
open_on_loopback = false``; from anywhere else the document needs a bearer token of the listener.
The buttons call the control API (``POST /v1/pause`` ...) with the token the page asks for and
keeps in the browser tab's sessionStorage.

The document is built on the service thread at most once a second (and at most a tenth of the
time: 10,000 VMs take about 0.2 s, so their document is rebuilt every 2 s), whoever asks: any
number of open pages cost the same.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..view.page import page_view
from .tokens import TokenTable, bearer

if TYPE_CHECKING:
    from ..service import Service

STATIC = Path(__file__).with_name("static")
FRESH_FOR = 1.0  # s a built document is served again, at least
BUSY_SHARE = 0.1  # at most this share of the service thread's time goes to building documents
TIMEOUT = 10.0
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                                "connect-src 'self'; base-uri 'none'; form-action 'none'; "
                                "frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def is_loopback_client(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


class ViewCache:
    """The last document as JSON bytes and gzipped, rebuilt when older than FRESH_FOR."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.lock = threading.Lock()
        self.built = -1e9
        self.raw = self.packed = b""
        self.build_seconds = 0.0

    def _build(self) -> dict[str, Any]:
        service = self.service
        describe = service.describe() if hasattr(service, "describe") else None
        return page_view(service.state, service.policy, time.time(), describe)

    def get(self) -> tuple[bytes, bytes]:
        with self.lock:
            if time.monotonic() - self.built < max(FRESH_FOR, self.build_seconds / BUSY_SHARE):
                return self.raw, self.packed
            started = time.perf_counter()
            document = self.service.submit(self._build).result(TIMEOUT)
            self.raw = json.dumps(document, separators=(",", ":")).encode("utf-8")
            self.packed = gzip.compress(self.raw, compresslevel=5)
            self.build_seconds = time.perf_counter() - started
            self.built = time.monotonic()
            return self.raw, self.packed


def page_routes(service: Service, tokens: TokenTable | list[str], open_on_loopback: bool | None = None
                ) -> list[Any]:
    """The routes to add to a Starlette app serving ``service`` with bearer ``tokens``."""
    from starlette.requests import Request
    from starlette.responses import FileResponse, JSONResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    if open_on_loopback is None:
        web = getattr(getattr(service, "settings", None), "web", None)
        open_on_loopback = True if web is None else web.open_on_loopback
    cache = ViewCache(service)
    table = TokenTable.of(tokens)

    def token_ok(request: Request) -> bool:
        return bearer(request, table) is not None

    async def page(_request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8",
                            headers=SECURITY_HEADERS)

    async def view(request: Request) -> Response:
        local = open_on_loopback and is_loopback_client(request.client.host if request.client else None)
        if not local and not token_ok(request):
            return JSONResponse({"error": "viewing from another host needs the bearer token"},
                                status_code=401, headers={"WWW-Authenticate": "Bearer", **SECURITY_HEADERS})
        try:
            raw, packed = await asyncio.to_thread(cache.get)
        except TimeoutError:
            return JSONResponse({"error": "the coordinator did not answer in time"}, status_code=504,
                                headers=SECURITY_HEADERS)
        headers = {**SECURITY_HEADERS, "Vary": "Accept-Encoding",
                   "Server-Timing": f"build;dur={cache.build_seconds * 1000:.1f}"}
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(packed, media_type="application/json",
                            headers={**headers, "Content-Encoding": "gzip"})
        return Response(raw, media_type="application/json", headers=headers)

    return [
        Route("/", page),
        Route("/page/v1/view", view),
        Mount("/page/static", app=StaticFiles(directory=STATIC), name="page-static"),
    ]
