"""Who the webhook sink says it is: Standard Webhooks signatures, static headers, Entra tokens.

Secrets (signing keys, header values from env/file, bearer tokens) are read when the sink is
created and never appear in a log line or an outcome reason.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ...errors import ConfigError, one_line
from ..azure_common import token_credential
from .config import header_text

TOKEN_REFRESH_MARGIN = 300.0  # renew a bearer token this long before it expires


class Signer:
    """Standard Webhooks signatures with every configured secret (several during a rotation)."""

    def __init__(self, secrets: Sequence[str]) -> None:
        from standardwebhooks.webhooks import Webhook

        self._hooks = [Webhook(s) for s in secrets]

    @staticmethod
    def check_secret(value: str, where: str) -> None:
        """Raise ConfigError, without echoing the value, unless it is ``whsec_<base64>``."""
        import binascii

        from standardwebhooks.webhooks import EmptyWebhookSecretError, Webhook

        if not value.startswith("whsec_"):
            raise ConfigError(f"{where} does not start with whsec_ (a Standard Webhooks secret)")
        try:
            Webhook(value)
        except (binascii.Error, ValueError, EmptyWebhookSecretError) as exc:
            raise ConfigError(f"{where} is not whsec_ followed by base64") from exc

    def headers(self, msg_id: str, body: bytes) -> dict[str, str]:
        """``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` for one attempt."""
        # The library formats ``timestamp.replace(tzinfo=UTC)``: it must already be UTC, or a
        # naive local time would be signed as if it were UTC.
        now = datetime.fromtimestamp(int(time.time()), UTC)
        text = body.decode("utf-8")
        signature = " ".join(h.sign(msg_id, now, text) for h in self._hooks)
        return {
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signature,
        }


class TokenError(Exception):
    """No bearer token could be obtained (the message is one line, without secrets)."""


class EntraToken:
    """A bearer token from the managed identity, cached until shortly before it expires."""

    def __init__(self, scope: str, client_id: str | None = None) -> None:
        try:
            self._credential = token_credential("managed-identity", client_id)
        except ImportError as exc:
            raise ConfigError(
                "auth = \"entra\" needs the package azure-identity; "
                "install it with: pip install 'se-forwarder[entra]'"
            ) from exc
        self.scope = scope
        self._token: str | None = None
        self._expires_on = 0.0
        self._lock = threading.Lock()

    def header(self) -> str:
        """``Bearer <token>``; raises TokenError with one line when none can be had."""
        with self._lock:
            if self._token is None or time.time() >= self._expires_on - TOKEN_REFRESH_MARGIN:
                try:
                    got = self._credential.get_token(self.scope)
                except Exception as exc:  # noqa: BLE001 - azure-identity raises several kinds
                    raise TokenError(
                        f"cannot get an Entra token for {self.scope} from the managed identity: "
                        f"{one_line(exc)}"
                    ) from exc
                self._token, self._expires_on = got.token, float(got.expires_on)
            return f"Bearer {self._token}"

    def close(self) -> None:
        self._credential.close()


def read_secrets(secret_env: Sequence[str], secret_file: Sequence[str], where: str) -> list[str]:
    """The signing secrets, from the variables and files named (one secret a line in a file, so a
    rotation is an edit); ConfigError naming the source of a missing or malformed one."""
    secrets: list[tuple[str, str]] = []  # (where it came from, value)
    for var in secret_env:
        value = os.environ.get(var, "").strip()
        if not value:
            raise ConfigError(f"{where} secret_env: environment variable {var} is not set or empty")
        secrets.append((f"${var}", value))
    for path in secret_file:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where} secret_file: cannot read {path}: {one_line(exc)}") from exc
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
        if not lines:
            raise ConfigError(f"{where} secret_file: {path} holds no secret")
        secrets += [(path, line) for line in lines]
    for origin, value in secrets:
        Signer.check_secret(value, f"{where}: the secret from {origin}")
    return [value for _, value in secrets]


def header_values(headers: Mapping[str, Any], where: str) -> dict[str, str]:
    """The static headers, with ``{env = ..}`` and ``{file = ..}`` values read now."""
    return {name: _header_value(value, f"{where} headers.{name}") for name, value in headers.items()}


def _header_value(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if "env" in value:
        text = os.environ.get(value["env"])
        if text is None:
            raise ConfigError(f"{where}: environment variable {value['env']} is not set")
    else:
        try:
            text = Path(value["file"]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}: cannot read {value['file']}: {one_line(exc)}") from exc
    text = text.strip()
    if any(c in text for c in "\r\n\0"):
        raise ConfigError(f"{where}: the value must be one line")
    return header_text(text, where)
