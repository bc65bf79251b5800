"""The Storage queue side of remote approvals: settings resolved at start, clients, ``check``.

``azure-storage-queue`` (and ``azure-identity`` for managed identity) are imported only inside the
functions, when ``[approvals.queue]`` is configured: ``pip install 'se-forwarder[queue]'``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError, one_line
from ...imds import ImdsClient, ImdsError
from ...model import VmIdentity
from ...sinks.azure_common import check_plaintext, read_connection_string, token_credential
from .. import signing
from .config import QueueConfig
from .names import poison_name, queue_name

log = logging.getLogger("se_forwarder.approvals.queue")


class KeySource:
    """The coordinator's public keys; a key file is read again when it changes (rotation without
    restart)."""

    def __init__(self, env_name: str | None, file: str | None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.env_name = env_name
        self.file = file
        self.environ = os.environ if environ is None else environ
        self._mtime = self._stat()
        self._keys = self._load()

    def _load(self) -> signing.VerifyKeys:
        return signing.VerifyKeys(signing.load_public_keys(self.env_name, self.file, self.environ))

    def _stat(self) -> float | None:
        try:
            return os.stat(self.file).st_mtime if self.file else None
        except OSError:
            return None

    def keys(self) -> signing.VerifyKeys:
        mtime = self._stat()
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                self._keys = self._load()
                log.info("verify keys reloaded from %s (keyids %s)", self.file,
                         ", ".join(self._keys.ids))
            except ConfigError as exc:
                log.error("keeping the previous verify keys: %s", exc)
        return self._keys


@dataclass(kw_only=True)
class QueueSettings:
    """``[approvals.queue]`` resolved for this VM (secrets read, SDK present)."""

    name: str
    template: str = ""  # the [approvals.queue] queue the name was made from
    account_url: str | None = None
    connection_string: str | None = dataclasses.field(repr=False, default=None)
    client_id: str | None = None
    keys: KeySource | None = dataclasses.field(repr=False, default=None)
    visibility_timeout: int
    poll_interval: float
    idle_poll_interval: float  # ... while the VM has no event (QueueConfig)
    secret_env: tuple[str, ...] = ()
    make: Callable[[str], Any] | None = dataclasses.field(repr=False, default=None)  # resolve's ``clients``

    @property
    def poison_name(self) -> str:
        return poison_name(self.name)

    def credential(self) -> Any:
        """The managed identity to use when there is no connection string (else None)."""
        if self.connection_string or self.make is not None:
            return None
        return token_credential("managed-identity", self.client_id)

    def client(self, name: str, credential: Any = None) -> Any:
        if self.make is not None:
            return self.make(name)
        return make_client(name, connection_string=self.connection_string,
                           account_url=self.account_url, credential=credential)


def resolve(raw: QueueConfig, vm: VmIdentity, environ: Mapping[str, str] | None = None,
            clients: Callable[[str], Any] | None = None) -> QueueSettings:
    """Everything the consumer needs, or ConfigError in one line (at agent start, not later).

    ``clients`` (queue name -> a ``QueueClient``) stands in for the Storage account: only code
    hands one in (the fleet demo's in-process queues); the configuration then names no account."""
    try:
        import azure.storage.queue  # noqa: F401
    except ImportError:
        raise ConfigError(
            "approvals.queue needs azure-storage-queue: pip install 'se-forwarder[queue]'"
        ) from None
    environ = os.environ if environ is None else environ
    try:
        conn = read_connection_string(raw.connection_string_env, raw.connection_string_file, environ)
    except ConfigError as exc:
        raise ConfigError(f"approvals.queue.connection_string_file: {exc}") from None
    if conn is not None:
        check_plaintext(conn, "approvals.queue connection string")
    account_url = raw.account_url
    if conn is None and not account_url and clients is None:
        raise ConfigError(
            f"approvals.queue: environment variable {raw.connection_string_env} is not set "
            "and no account_url is given (for managed identity)"
        )
    if conn is None and clients is None:
        try:
            import azure.identity  # noqa: F401
        except ImportError:
            raise ConfigError(
                "approvals.queue with managed identity needs azure-identity: "
                "pip install 'se-forwarder[queue]'"
            ) from None
    keys = KeySource(raw.verify_keys_env, raw.verify_keys_file, environ)
    return QueueSettings(
        name=queue_name(raw.queue, vm.name, vm.vm_id),
        template=raw.queue,
        account_url=account_url,
        connection_string=conn,
        client_id=raw.client_id,
        keys=keys,
        visibility_timeout=raw.visibility_timeout,
        poll_interval=raw.poll_interval,
        idle_poll_interval=raw.idle_poll_interval,
        secret_env=tuple(n for n in (raw.connection_string_env,) if n),
        make=clients,
    )


def make_client(name: str, *, connection_string: str | None = None, account_url: str | None = None,
                credential: Any = None) -> Any:
    """A ``QueueClient`` with short timeouts and few retries (the caller has its own backoff)."""
    from azure.storage.queue import LinearRetry, QueueClient

    options: dict[str, Any] = {
        "retry_policy": LinearRetry(backoff=1, retry_total=1, random_jitter_range=0),
        "connection_timeout": 5,
        "read_timeout": 15,
    }
    if connection_string:
        return QueueClient.from_connection_string(connection_string, name, **options)
    if not account_url:
        raise ConfigError("approvals.queue: neither a connection string nor an account_url")
    return QueueClient(account_url, name, credential=credential, **options)


def create_if_missing(client: Any) -> bool:
    """Create the queue; True if it exists afterwards (False: no right to create it)."""
    from azure.core.exceptions import HttpResponseError, ResourceExistsError

    try:
        client.create_queue()
    except ResourceExistsError:
        pass
    except HttpResponseError as exc:
        if exc.status_code in (401, 403):
            return False
        raise
    return True


def check(settings: Any) -> str | None:
    """For ``se-forwarder check``: the problem with ``[approvals.queue]`` in one line, or None.

    Reads this VM's identity from IMDS (the queue name may contain it), the keys and connection
    string, then asks the service for both queues' properties.
    """
    from azure.core.exceptions import AzureError, ClientAuthenticationError, ResourceNotFoundError

    imds = ImdsClient(settings.imds.url, settings.imds.api_version, timeout=settings.imds.timeout,
                      first_call_timeout=max(settings.imds.timeout, 10.0),
                      lease_files=settings.imds.lease_files)
    try:
        vm = VmIdentity.from_compute(imds.get_compute())
    except (ImdsError, ValueError) as exc:
        return f"cannot name the queue without the VM's identity: {exc}"
    finally:
        imds.close()
    try:
        resolved = resolve(settings.approvals.queue, vm)
        credential = resolved.credential()
        for name in (resolved.name, resolved.poison_name):
            client = resolved.client(name, credential)
            try:
                client.get_queue_properties()
            except ResourceNotFoundError:
                return (f"queue {name} does not exist (the agent creates it at start when its "
                        "identity may; otherwise create it)")
            except ClientAuthenticationError as exc:
                return f"not allowed to read queue {name}: {one_line(exc)}"
            except AzureError as exc:
                return f"queue {name} unreachable: {one_line(exc)}"
    except ConfigError as exc:
        return str(exc)
    except ValueError as exc:  # a connection string the SDK cannot parse
        return f"the Storage connection string is not valid: {one_line(exc)}"
    return None
