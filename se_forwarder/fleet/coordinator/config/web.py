"""``[web]`` in ``coordinator.toml``: the fleet page's own listener (optional)::

    [web]
    host = "127.0.0.1"          # where the page listens (it also answers the control API there)
    port = 8471
    token_file = ""             # bearer tokens for the page's buttons (default: api.token_file)
    open_on_loopback = true     # read-only viewing without a token from 127.0.0.1/::1; set false
                                # when a reverse proxy on this host forwards other people's requests

Without ``[web]`` the page is served on the control API's listener (``[api] listen``) only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ....errors import ConfigError
from ....validation import as_bool, as_int, as_str, no_unknown

DEFAULT_PORT = 8471


@dataclass(frozen=True)
class WebSettings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token_file: str = ""
    open_on_loopback: bool = True


def load_web(raw: Any) -> WebSettings | None:
    """``[web]``, or None when the table is absent; ConfigError naming the key otherwise."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError("web: must be a table ([web])")
    no_unknown(raw, "web", ("host", "port", "token_file", "open_on_loopback"))
    host = as_str(raw.get("host", "127.0.0.1"), "web.host").strip().strip("[]")
    if not host or any(c in host for c in "/ "):
        raise ConfigError(f"web.host: {host!r} is not a host name or address (e.g. 127.0.0.1)")
    port = as_int(raw.get("port", DEFAULT_PORT), "web.port", 0, 65535)
    token_file = as_str(raw.get("token_file", ""), "web.token_file").strip()
    return WebSettings(host, port, str(Path(token_file).expanduser()) if token_file else "",
                       as_bool(raw.get("open_on_loopback", True), "web.open_on_loopback"))
