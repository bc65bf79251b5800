"""`se-forwarder fleet approve` and `fleet keygen`: the coordinator's side sends signed approvals.

The message format and signature are defined in ``approvals/signing.py``; the queue name for
``--vm`` is computed exactly as the agent computes its own (``approvals.queue.names.queue_name``),
and a ``--queue`` given alone is traced back to its VM by the same rule (``vm_for_queue``) so the
message is bound to that VM when the name tells it. The click commands are in ``cli/fleet.py``.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..approvals import signing
from ..approvals.messages import EVENT_ID, MAX_LIFETIME
from ..approvals.queue.client import make_client
from ..approvals.queue.names import queue_name, validate_account_url, vm_for_queue
from ..errors import ConfigError, SeForwarderError, one_line
from ..sinks.azure_common import check_plaintext, read_connection_string, token_credential

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_REASON = 1000


def parse_duration(text: str, where: str = "--expires-in") -> timedelta:
    """``90``, ``30s``, ``10m``, ``2h``: a positive duration of at most 24 h."""
    match = DURATION.match(text)
    if not match:
        raise ConfigError(f"{where}: {text!r} is not a duration like 30s, 10m or 2h")
    seconds = float(match.group(1)) * UNITS[match.group(2)]
    if not 0 < seconds <= MAX_LIFETIME.total_seconds():
        raise ConfigError(f"{where}: must be more than 0 and at most 24h (agents refuse longer ones)")
    return timedelta(seconds=seconds)


def default_source() -> str:
    return f"urn:se-forwarder:fleet:{socket.gethostname() or 'coordinator'}"


@dataclass(frozen=True)
class Approval:
    """A signed approval message and the queue it goes to."""

    queue: str
    message: dict[str, Any]
    note: str = ""  # how the message is bound, when that was not given by --vm

    @property
    def text(self) -> str:
        return signing.encode(self.message)


def sign_approval(event_id: str, *, vm_name: str | None, queue: str | None, queue_template: str,
                  expires_in: str, reason: str, source: str | None, key_env: str,
                  key_file: str | None, environ: Any = None) -> Approval:
    """Check the options and sign; ConfigError naming the option that is wrong."""
    if not EVENT_ID.match(event_id):
        raise ConfigError(f"--event-id {event_id!r} is not an EventId")
    if bool(vm_name) == bool(queue):
        raise ConfigError("give exactly one of --vm NAME or --queue NAME")
    lifetime = parse_duration(expires_in)
    if len(reason) > MAX_REASON or any(ord(c) < 32 for c in reason):
        raise ConfigError(f"--reason must be one line of at most {MAX_REASON} characters")
    name = queue_name(queue_template, vm_name) if vm_name else queue_name(queue or "", "")
    if queue and name != queue:
        raise ConfigError(f"--queue {queue!r} is not a valid queue name (did you mean {name!r}?)")
    note = ""
    if queue:
        vm_name = vm_for_queue(queue_template, queue)
        note = (f"bound to VM {vm_name} (from the queue name)" if vm_name else
                f"unbound: the queue name does not tell the VM (--queue-template {queue_template!r});"
                " any VM reading this queue may act on it; give --vm to bind it")
    key = signing.load_signing_key(key_env if not key_file else None, key_file, environ)
    now = datetime.now(UTC)
    message = signing.new_message(
        event_id, source=source or default_source(), key=key, expires_at=now + lifetime,
        reason=reason, vm_name=vm_name, now=now,
    )
    return Approval(name, message, note)


def send(approval: Approval, account_url: str | None, conn_env: str, conn_file: str | None) -> None:
    """Put the message on its queue (ConfigError saying why it cannot be sent)."""
    client = _client(approval.queue, account_url, conn_env, conn_file)
    from azure.core.exceptions import AzureError, ClientAuthenticationError, ResourceNotFoundError

    name = approval.queue
    try:
        client.send_message(approval.text)
    except ResourceNotFoundError:
        raise ConfigError(f"queue {name} does not exist (is the agent configured with this "
                          "queue name, and has it started?)") from None
    except ClientAuthenticationError as exc:
        raise ConfigError(f"not allowed to send to queue {name}: {one_line(exc)}") from None
    except AzureError as exc:
        raise ConfigError(f"cannot send to queue {name}: {one_line(exc)}") from None


def _client(name: str, account_url: str | None, conn_env: str, conn_file: str | None) -> Any:
    try:
        import azure.storage.queue  # noqa: F401
    except ImportError:
        raise ConfigError("azure-storage-queue is missing: pip install 'se-forwarder[queue]'") from None
    try:
        conn = read_connection_string(conn_env, conn_file)
    except ConfigError as exc:
        raise ConfigError(f"--connection-string-file: {exc}") from None
    if conn:
        check_plaintext(conn, f"the connection string in {conn_file or conn_env}")
        try:
            return make_client(name, connection_string=conn)
        except ValueError:
            raise ConfigError("the Storage connection string is not valid") from None
    if not account_url:
        raise ConfigError(f"no queue to send to: set {conn_env} (a connection string), or give "
                          "--connection-string-file or --account-url")
    account_url = validate_account_url(account_url, "--account-url")
    try:
        credential = token_credential("default")
    except ImportError:
        raise ConfigError("azure-identity is missing: pip install 'se-forwarder[queue]'") from None
    return make_client(name, account_url=account_url, credential=credential)


def _create(path: Path, mode: int) -> int:
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise SeForwarderError(f"{path} exists; not overwriting a key (choose another --out)") from None
    except OSError as exc:
        raise SeForwarderError(f"cannot create {path}: {exc.strerror}") from None


def write_key(out: str) -> str:
    """A new Ed25519 key pair: the private key (PKCS#8 PEM) in the new file ``out`` (mode 0600),
    the public key (one line, base64 of the raw 32 bytes) in ``out.pub``; neither is overwritten.
    Returns the public line."""
    path, pub = Path(out), Path(out + ".pub")
    if pub.exists():
        raise SeForwarderError(f"{pub} exists; not overwriting a key (choose another --out)")
    key = signing.generate_private_key()
    fd = _create(path, 0o600)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), 0o600)  # whatever the umask
        fh.write(signing.private_key_pem(key))
    line = signing.public_key_line(key)
    try:
        fd = _create(pub, 0o644)
    except SeForwarderError:
        path.unlink()
        raise
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(line + "\n")
    return line
