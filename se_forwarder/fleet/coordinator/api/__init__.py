"""The control API and its clients: Starlette on uvicorn in a thread of the service.

``server`` (routes, trusted hosts, bearer tokens from ``tokens``), ``page`` (the fleet page's
routes and its ``static/`` files) and ``client`` (the commands' side: requests to a running
coordinator, and ``status`` as text).
"""

from __future__ import annotations

from .client import Client, render_status
from .page import is_loopback_client
from .server import ApiServer, host_allowed
from .tokens import TokenTable, read_tokens, unnamed

__all__ = [
    "ApiServer", "Client", "TokenTable", "host_allowed", "is_loopback_client", "read_tokens",
    "render_status", "unnamed"
]
