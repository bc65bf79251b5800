"""The fleet page's routes (Starlette), added to the control API's app (api/server.py).

=========================  =========================================================  ==============
route                      what                                                       auth
=========================  =========================================================  ==============
``GET /``                  the page (static HTML; no build step, nothing from a CDN)  no
``GET /page/static/*``     its script, style sheet and icon                           no
``GET /page/v1/view``      the page's document (view/page.py), gzipped when asked     loopback or
                                                                                      bearer
``GET /page/v1/group``     ``?group=<name>&offset=0&limit=2000``: a page of one       loopback or
                           group's VMs (view.page.group_view), 404 for no such group  bearer
``GET /page/v1/search``    ``?q=<text>&limit=50``: the VMs whose name contains it     loopback or
                           (view.page.search_view)                                    bearer
=========================  =========================================================  ==============

Read-only viewing is open to clients on loopback (127.0.0.0/8, ::1) unless ``[web]
open_on_loopback = false``; from anywhere else the document needs a bearer token of the listener.
The buttons call the control API (``POST /v1/pause`` ...) with the token the page asks for and
keeps in the browser tab's sessionStorage.

The document is built on the service thread at most once a second, and at most a tenth of the
time (100,000 VMs take about 0.5 s on a quiet machine, so their document is rebuilt every 5 s),
whoever asks: any number of open pages cost the same. The page's HTML, asked by someone who may
view, starts a build that is due, so it is under way when the script asks for the document.

Above view.page.INLINE_VMS VMs its groups are summarised, and a group's VMs and a search are read on
the service thread from what the last document was made of (view.page.Context, however old: a read
builds none): a group costs its VMs, a search a look at every VM's name.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..view.page import GROUP_PAGE, SEARCH_LISTED, Context, group_view, page_document, search_view
from .tokens import TokenTable, bearer

if TYPE_CHECKING:
    from ..service import Service

log = logging.getLogger("se_forwarder.coordinator.api")
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
        self.context: Context | None = None

    def _build(self) -> tuple[dict[str, Any], Context]:
        service = self.service
        describe = service.describe() if hasattr(service, "describe") else None
        return page_document(service.state, service.policy, time.time(), describe)

    def warm(self) -> None:
        """The document built now if it is due, unless a build is under way; never raises."""
        if self.lock.locked():
            return
        try:
            self.get()
        except Exception:  # noqa: BLE001 - the page's own request for it says what went wrong
            log.debug("building the page's document ahead failed", exc_info=True)

    def get(self) -> tuple[bytes, bytes]:
        with self.lock:
            if time.monotonic() - self.built < max(FRESH_FOR, self.build_seconds / BUSY_SHARE):
                return self.raw, self.packed
            started = time.perf_counter()
            document, self.context = self.service.submit(self._build).result(TIMEOUT)
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

    def refused(request: Request) -> Response | None:
        """401 unless the client may view (loopback, or the bearer token)."""
        local = open_on_loopback and is_loopback_client(request.client.host if request.client else None)
        if local or token_ok(request):
            return None
        return JSONResponse({"error": "viewing from another host needs the bearer token"},
                            status_code=401, headers={"WWW-Authenticate": "Bearer", **SECURITY_HEADERS})

    async def from_context(request: Request, read: Callable[[Context], Any]) -> Response:
        """``read`` of the last document's Context, on the service's thread, as JSON."""
        try:
            if cache.context is None:  # else the last one's, however old: a read does not build one
                await asyncio.to_thread(cache.get)
            context = cache.context
            assert context is not None
            reading = service.submit(lambda: read(context))
            found = await asyncio.wait_for(asyncio.wrap_future(reading), TIMEOUT)
        except TimeoutError:
            return _fail("the coordinator did not answer in time", 504)
        return _fail("no such group", 404) if found is None else _json(request, found)

    async def read(request: Request) -> Response:
        """``/page/v1/group`` and ``/page/v1/search``."""
        no = refused(request)
        if no is not None:
            return no
        made = _read_of(request.url.path.rsplit("/", 1)[-1], request.query_params)
        if isinstance(made, str):
            return _fail(made, 400)
        return await from_context(request, made)

    async def page(request: Request) -> Response:
        if refused(request) is None:  # its script asks for the document next: have it built by then
            asyncio.get_running_loop().run_in_executor(None, cache.warm)
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8",
                            headers=SECURITY_HEADERS)

    async def view(request: Request) -> Response:
        no = refused(request)
        if no is not None:
            return no
        try:
            raw, packed = await asyncio.to_thread(cache.get)
        except TimeoutError:
            return _fail("the coordinator did not answer in time", 504)
        headers = {**SECURITY_HEADERS, "Vary": "Accept-Encoding",
                   "Server-Timing": f"build;dur={cache.build_seconds * 1000:.1f}"}
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(packed, media_type="application/json",
                            headers={**headers, "Content-Encoding": "gzip"})
        return Response(raw, media_type="application/json", headers=headers)

    return [
        Route("/", page),
        Route("/page/v1/view", view), Route("/page/v1/group", read), Route("/page/v1/search", read),
        Mount("/page/static", app=StaticFiles(directory=STATIC), name="page-static"),
    ]


def _number(text: str, high: int) -> int | None:
    """A whole number from 0 to ``high`` (None: not one)."""
    return int(text) if text.isdigit() and len(text) <= 10 and int(text) <= high else None


def _json(request: Any, data: Any) -> Any:
    """``data`` as JSON, gzipped when the client takes it and it is worth it."""
    from starlette.responses import Response

    raw = json.dumps(data, separators=(",", ":")).encode("utf-8")
    headers = {**SECURITY_HEADERS, "Vary": "Accept-Encoding"}
    if "gzip" in request.headers.get("accept-encoding", "") and len(raw) > 1024:
        headers["Content-Encoding"] = "gzip"
        raw = gzip.compress(raw, compresslevel=5)
    return Response(raw, media_type="application/json", headers=headers)


def _fail(message: str, code: int) -> Any:
    """``{"error": message}`` with ``code``."""
    from starlette.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=code, headers=SECURITY_HEADERS)


def _read_of(kind: str, params: Mapping[str, str]) -> Callable[[Context], Any] | str:
    """What ``/page/v1/<kind>`` reads from a Context, or why its parameters are wrong."""
    if kind == "group":
        name = params.get("group", "")
        offset = _number(params.get("offset", "0"), 10**9)
        limit = _number(params.get("limit", str(GROUP_PAGE)), GROUP_PAGE)
        if not name or offset is None or not limit:
            return f"group is required; offset a whole number, limit one from 1 to {GROUP_PAGE}"
        return lambda context: group_view(context, name, offset, limit)
    text = params.get("q", "").strip()
    found = _number(params.get("limit", str(SEARCH_LISTED)), SEARCH_LISTED)
    if not text or len(text) > 256 or not found:
        return f"q is required (at most 256 characters); limit from 1 to {SEARCH_LISTED}"
    return lambda context: search_view(context, text, found)
