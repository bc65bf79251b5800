"""The coordinator's HTTP API (Starlette on uvicorn, in a thread of the service).

=============================  ===========================================================  =======
route                          what                                                          auth
=============================  ===========================================================  =======
``GET /healthz``               200/503 and one line (observe.health)                         no
``GET /metrics``               Prometheus text                                               no
``GET /v1/status``             view.status plus ``service`` (role, leader, positions);       bearer
                               ``?all=1`` every scope, ``?decisions=N`` the log's length
``GET /v1/groups``             view.groups (``?group=``, ``?search=``)                       bearer
``GET /v1/state``              the fold's digest and positions (two instances compare)       bearer
``POST /v1/pause|resume``      ``{"scope", "reason"}``                                       bearer
``POST /v1/hold|release``      ``{"eventId", "reason"}``                                     bearer
``POST /v1/approve``           ``{"eventId", "scopes": [...], "reason"}``                    bearer
``POST /v1/confirm``           ``{"scope", "reason"}``: where its VMs claim to be            bearer
``POST /v1/settle``            ``{"vmId", "keyid" (or null), "reason"}``: a key conflict     bearer
=============================  ===========================================================  =======

A control request answers 200 with the decision (its signed CloudEvent, ``"published": true``)
once it is published and folded; 202 with the decision (not yet signed: it is signed as it is
published) and ``"published": false`` when it is made and in force on this instance but the hub
has not taken it within ``PUBLISH_WAIT`` (the hub is unreachable: it is published when the hub
answers again); 409 ``{"error", "code"}`` when the core refuses it or its decision would not fold
(``not-folded``: nothing changed, nothing is published; control.py); 503 ``{"error", "leader"}``
on a standby (with the leader's advertised address) or while this instance cannot act (catching
up, its lease not renewed: the error says why), 401 without the right token, 400 for a malformed
body. The actor a decision records is the name of the token that authorised the request in the
token table (tokens.py); an ``actor`` in the body is ignored. The server binds ``[api] listen``,
127.0.0.1:8470 by default.

Every route, the fleet page's too, answers 400 to a request whose ``Host`` is not a trusted host
(``host_allowed``): ``localhost``, an IP address, or a name in ``[api] allowed_hosts``. This stops
DNS rebinding: a page from a name the attacker controls, whose DNS then points at this listener
(or at the loopback end of an ``ssh -L`` tunnel), sends its own name as the Host and gets
nothing. An IP address cannot be rebound, so addresses need no configuring.

Nothing here waits on the Azure services: requests that read the fold run on the service's loop,
which never blocks on them (service.py), and ``/healthz`` reads no fold at all.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from ....errors import ConfigError
from .. import observe
from ..decide import control
from ..decide.control import ControlRefused
from ..decide.events import to_dict
from ..view.groups import groups
from .tokens import TokenTable, bearer, read_tokens

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from ..service import Service

    Handler = Callable[[Request], Awaitable[Response]]

__all__ = ["ApiServer", "BadRequest", "bearer", "host_allowed", "make_app", "read_tokens"]

log = logging.getLogger("se_forwarder.coordinator.api")

REQUEST_TIMEOUT = 10.0  # s a request waits for the service thread (it answers within a turn: < 1 s)
PUBLISH_WAIT = 1.0  # s a control request waits for its decision's publication before answering 202
MAX_BODY = 64 * 1024


def host_allowed(header: str, names: Iterable[str] = ()) -> bool:
    """Whether a ``Host`` header names a trusted host: ``localhost``, an IP address (IPv6 in
    brackets), or one of ``names``; any port."""
    host = header.strip().lower()
    if host.startswith("["):
        address, closed, rest = host[1:].partition("]")
        return bool(closed) and _ip(address) and (not rest or (rest[:1] == ":" and rest[1:].isdigit()))
    name, sep, port = host.partition(":")
    if sep and not port.isdigit():
        return False
    name = name.rstrip(".")
    return bool(name) and (name == "localhost" or _ip(name) or name in {n.lower() for n in names})


def _ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class TrustedHosts:
    """ASGI middleware: 400 for a request whose Host is not trusted (``host_allowed``)."""

    def __init__(self, app: Any, names: Iterable[str] = ()) -> None:
        self.app, self.names = app, tuple(names)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if not host_allowed(host, self.names):
                from starlette.responses import JSONResponse

                refusal = JSONResponse({"error": "this Host is not one the coordinator answers to "
                                        "(localhost, an IP address, or [api] allowed_hosts)"},
                                       status_code=400)
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)


def make_app(service: Service, tokens: TokenTable | list[str]) -> Any:
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    from .page import page_routes

    table = TokenTable.of(tokens)
    api = getattr(getattr(service, "settings", None), "api", None)
    trusted = tuple(getattr(api, "allowed_hosts", ()))

    async def on_service(func: Callable[[], Any]) -> Any:
        return await asyncio.wait_for(asyncio.wrap_future(service.submit(func)), REQUEST_TIMEOUT)

    guarded = _guard(table)

    async def healthz(_request: Request) -> Response:
        try:
            ok, line = observe.health(service.health())
        except RuntimeError:  # a partition seen for the first time while reading: ask again
            ok, line = observe.health(service.health())
        return PlainTextResponse(line + "\n", status_code=200 if ok else 503,
                                 headers={"Cache-Control": "no-store"})

    async def metrics(_request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        data = await on_service(lambda: observe.values(service.stats(), service.fleet_stats()))
        return Response(observe.render(data), media_type=CONTENT_TYPE_LATEST)

    async def status(request: Request) -> Response:
        everything = request.query_params.get("all") in ("1", "true")
        limit = _int(request.query_params.get("decisions", "50"), "decisions", 0, 10_000)
        return JSONResponse(await on_service(lambda: service.status(everything, limit)))

    async def fleet_groups(request: Request) -> Response:
        import time

        group, search = request.query_params.get("group"), request.query_params.get("search")
        return JSONResponse(await on_service(
            lambda: groups(service.state, service.policy, time.time(), group=group, search=search)))

    async def state(_request: Request) -> Response:
        return JSONResponse(await on_service(lambda: {"digest": service.digest(), **service.describe()}))

    routes = [
        Route("/healthz", healthz), Route("/metrics", metrics),
        Route("/v1/status", guarded(status)), Route("/v1/groups", guarded(fleet_groups)),
        Route("/v1/state", guarded(state)),
        *[Route(f"/v1/{kind}", guarded(_action(kind, service, on_service)), methods=["POST"])
          for kind in ("pause", "resume", "hold", "release", "approve", "confirm", "settle")],
        *page_routes(service, table),
    ]
    return Starlette(routes=routes, middleware=[Middleware(TrustedHosts, names=trusted)])


def _guard(table: TokenTable) -> Callable[[Handler], Handler]:
    """A handler behind the bearer token, with the refusals a control request may meet as answers."""
    from starlette.responses import JSONResponse

    from ..ha.election import NotLeading

    def guarded(handler: Handler) -> Handler:
        async def wrapper(request: Request) -> Response:
            name = bearer(request, table)
            if name is None:
                return JSONResponse({"error": "a valid bearer token is required (api.token_file)"},
                                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
            request.state.actor = name
            try:
                return await handler(request)
            except ControlRefused as exc:
                return JSONResponse({"error": str(exc), "code": exc.code}, status_code=409)
            except NotLeading as exc:
                return JSONResponse({"error": str(exc), "leader": exc.leader or None}, status_code=503)
            except BadRequest as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            except TimeoutError:
                return JSONResponse({"error": "the coordinator did not answer in time (busy reading the "
                                     "hub?); a control request may still be published"}, status_code=504)
        return wrapper
    return guarded


def _action(kind: str, service: Service,
            on_service: Callable[[Callable[[], Any]], Awaitable[Any]]) -> Handler:
    """``POST /v1/<kind>``: the control decision made on the service's thread, and whether it is on the
    hub within ``PUBLISH_WAIT``."""
    from starlette.responses import JSONResponse

    async def handler(request: Request) -> Response:
        body = await _json(request)
        actor, reason = request.state.actor, _field(body, "reason")  # the token's name, never the body's
        make = _maker(kind, body, actor, reason, service)
        decision, published = await on_service(lambda: service.control(make))
        try:
            event = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(published)), PUBLISH_WAIT)
        except TimeoutError:
            return JSONResponse({"decision": to_dict(decision, service.source), "published": False,
                                 "note": "made and in force on this instance; not yet on the Event Hub "
                                 "(it is published as soon as the hub answers)"}, status_code=202)
        return JSONResponse({"decision": event, "published": True})
    return handler


class BadRequest(Exception):
    pass


async def _json(request: Any) -> dict[str, Any]:
    import json

    body = await request.body()
    if len(body) > MAX_BODY:
        raise BadRequest("the body is too large")
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise BadRequest("the body is not JSON") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    return data


def _field(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"{key} is required")
    return value


def _int(text: str, name: str, low: int, high: int) -> int:
    if not text.isdigit() or not low <= int(text) <= high:
        raise BadRequest(f"{name} must be a whole number from {low} to {high}")
    return int(text)


def _maker(kind: str, body: dict[str, Any], actor: str, reason: str, service: Service) -> Callable[..., Any]:
    policy = service.policy
    if kind in ("pause", "resume", "confirm"):
        scope = body.get("scope")
        if scope is not None and not isinstance(scope, str):
            raise BadRequest("scope must be a string")
        switch = {"pause": control.pause, "resume": control.resume, "confirm": control.confirm}[kind]
        return lambda state, now: switch(state, policy, now, scope, actor, reason)
    if kind == "settle":
        vm_id, keyid = body.get("vmId"), body.get("keyid")
        if not isinstance(vm_id, str) or not (keyid is None or isinstance(keyid, str)):
            raise BadRequest("vmId is required, and keyid a key id or null")
        return lambda state, now: control.settle(state, policy, now, vm_id, keyid, actor, reason)
    event_id = body.get("eventId")
    if not isinstance(event_id, str):
        raise BadRequest("eventId is required")
    if kind == "approve":
        scopes = body.get("scopes", [])
        if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
            raise BadRequest("scopes must be a list of scopes")
        return lambda state, now: control.approve_now(state, policy, now, event_id, actor, reason, scopes)
    if kind == "hold":
        return lambda state, now: control.hold(state, policy, now, event_id, actor, reason)
    return lambda state, now: control.release(state, policy, now, event_id, actor, reason)


class ApiServer:
    """uvicorn serving the app on a socket bound here (so a taken port is one clear error)."""

    def __init__(self, service: Service, host: str, port: int, tokens: TokenTable | list[str]) -> None:
        import uvicorn

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise ConfigError(f"api.listen: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        sock.listen(64)
        self.sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(make_app(service, tokens), log_config=None, access_log=False,
                                lifespan="off", timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       name="coordinator-api", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(5)
        self.sock.close()
