"""``coordinator.toml`` for the service: where it reads, keeps its state, sends, listens. Validated once.

The policy sections (``[policy]``, ``[[budgets]]``, ``[[blackouts]]``, ``[[windows]]``) are read by
config/policy.py; this module reads the others and rejects any other top-level key::

    [coordinator]
    name = "prod"                        # one name for every instance of this coordinator: its
                                         # decisions' CloudEvent source is urn:se-forwarder:coordinator:<name>
    instance = ""                        # this instance, in the lease and the logs (default: host name)

    [eventhub]                           # where the agents send their CloudEvents
    fully_qualified_namespace = "ns.servicebus.windows.net"
    eventhub = "scheduled-events"
    consumer_group = "coordinator"       # its own consumer group (every instance reads every partition;
                                         # the one the Bicep creates)
    credential = "managed-identity"      # managed-identity | default | connection-string
    client_id = ""                       # a user-assigned identity's client id
    connection_string_env = "EH_CONN"    # credential = connection-string: an environment variable
    # connection_string_file = "..."     # ... or a file

    [storage]                            # a blob container: the leader's lease and the snapshots
    account_url = "https://acct.blob.core.windows.net"
    container = "se-coordinator"
    credential = "managed-identity"      # (client_id, connection_string_env/_file as above)
    lease_duration = "15s"               # 15s..60s: a standby takes over this long after a crash
    snapshot_interval = "1m"             # the fold is saved this often (and at a clean stop)

    [queues]                             # the agents' approval queues
    account_url = "https://acct.queue.core.windows.net"
    queue = "se-approvals-{vm_name}"     # the agents' [approvals.queue] queue template
    credential = "managed-identity"      # (client_id, connection_string_env/_file as above)
    message_ttl = "15m"                  # an approval message is valid this long (<= 24h)

    [signing]
    key_file = "/etc/se-forwarder/coordinator-signing.key"   # the Ed25519 private key ('fleet keygen'),
    # key_vault_secret = "https://<vault>.vault.azure.net/secrets/<name>"   # or a Key Vault secret
                                         # holding it (config/signing.py)

    [trust]                              # whose word it takes: coordinator keys, the agents' signed
                                         # reports and registrations (config/trust.py)

    [api]
    listen = "127.0.0.1:8470"            # the control API, /metrics and /healthz
    token_file = "/etc/se-forwarder/coordinator-api.token"   # the API's token table (tokens.py)
    advertise = ""                       # the URL a standby names as the leader's (default http://<listen>)
    allowed_hosts = []                   # host names the API and page answer to, besides localhost and
                                         # IP addresses (api/server.py: no DNS rebinding)

    [telemetry]
    log_format = "auto"                  # auto | json | text
    log_level = "info"

    [azure]                              # optional: Azure's own feed beside the agents (config/azure.py)
    [limits]                             # optional: how much of the fold one VM may take (limits.py)
    [web]                                # optional: the fleet page's own listener (config/web.py)
    [[notify]]                           # optional, repeatable: Teams/Slack messages (output/chat.py)
    [shard]                              # optional: the subscriptions this coordinator owns (shard.py)
    [[gates]]                            # optional, repeatable: what closes early approval (config/gates.py)

Secrets come only from environment variables and files, never from this file.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ....approvals.queue import validate_account_url, validate_template
from ....errors import ConfigError
from ....validation import as_choice, as_str, no_unknown
from .azure import AzureSettings, load_azure
from .gates import GateSettings, load_gates
from .hub import ACCESS_KEYS, Access, EventHubSettings, load_access, load_eventhub, path
from .limits import DEFAULT_LIMITS, Limits, load_limits
from .notify import NotifySettings, load_notify
from .policy import POLICY_SECTIONS, Policy, load_policy, parse_duration
from .shard import ShardSettings, check_within, load_shard
from .signing import VaultSecret, load_signing
from .trust import TrustSettings, load_trust
from .web import WebSettings, load_web

LOG_FORMATS = ("auto", "json", "text")
LOG_LEVELS = ("debug", "info", "warning", "error")
SECTIONS = ("coordinator", "eventhub", "storage", "queues", "signing", "trust", "api", "telemetry", "limits",
            "web", "notify", "azure", "shard", "gates")
DEFAULT_LISTEN = "127.0.0.1:8470"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
_CONTAINER = re.compile(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]\Z")
_HOST = re.compile(r"^(?=.{1,253}\Z)[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*\Z")


@dataclass(frozen=True)
class StorageSettings:
    account_url: str
    container: str
    access: Access
    lease_duration: float = 15.0
    snapshot_interval: float = 60.0


@dataclass(frozen=True)
class QueueSettings:
    account_url: str
    template: str
    access: Access
    message_ttl: float = 900.0


@dataclass(frozen=True)
class ApiSettings:
    host: str
    port: int
    token_file: str
    advertise: str
    allowed_hosts: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class ServiceSettings:
    name: str
    instance: str
    eventhub: EventHubSettings
    storage: StorageSettings
    queues: QueueSettings
    key_file: str
    api: ApiSettings
    policy: Policy
    log_format: str = "auto"
    log_level: str = "info"
    source_file: str = field(default="", compare=False)
    web: WebSettings | None = None
    notify: tuple[NotifySettings, ...] = ()
    trust: TrustSettings = field(default_factory=TrustSettings)
    limits: Limits = DEFAULT_LIMITS
    azure: AzureSettings | None = None  # [azure]: Azure's own feed, Resource Graph, acknowledge
    key_vault: VaultSecret | None = None  # [signing] key_vault_secret (then key_file is "")
    gates: tuple[GateSettings, ...] = ()  # [[gates]]: what closes early approval (config/gates.py)
    shard: ShardSettings | None = None  # [shard]: the subscriptions it owns; None: every one

    @property
    def unit(self) -> str:
        """What acts as one coordinator: ``<name>``, or ``<name>/<shard>`` for a shard. Its decisions'
        source, its lease and snapshot blobs and its pagers' dedup keys carry it."""
        return f"{self.name}/{self.shard.name}" if self.shard is not None else self.name

    @property
    def coordinator_keys(self) -> tuple[str, ...]:
        """``[trust] coordinator_keys``: more public keys whose decisions are folded."""
        return self.trust.coordinator_keys

    @property
    def source(self) -> str:
        """The CloudEvent source of this coordinator's decisions (the same on every instance)."""
        return f"urn:se-forwarder:coordinator:{self.unit}"


def load(path: str | Path) -> ServiceSettings:
    """Read and validate ``coordinator.toml``; ConfigError naming the file and key otherwise."""
    import tomllib

    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    settings = from_dict(raw)
    return ServiceSettings(**{**settings.__dict__, "source_file": str(path)})


def from_dict(raw: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> ServiceSettings:
    for key in raw:
        if key not in SECTIONS and key not in POLICY_SECTIONS:
            raise ConfigError(f"unknown section or key {key!r} (known: "
                              f"{', '.join(SECTIONS + POLICY_SECTIONS)})")
    coordinator = _table(raw, "coordinator")
    no_unknown(coordinator, "coordinator", ("name", "instance"))
    name = _name(coordinator.get("name", "default"), "coordinator.name")
    instance = _name(coordinator.get("instance") or socket.gethostname() or "instance",
                     "coordinator.instance")
    telemetry = _table(raw, "telemetry")
    no_unknown(telemetry, "telemetry", ("log_format", "log_level"))
    key_file, key_vault = load_signing(_table(raw, "signing"))
    queues = _queues(_table(raw, "queues"))
    shard = load_shard(raw.get("shard"))
    azure = load_azure(_sharded(raw.get("azure"), shard))
    trust = load_trust(raw.get("trust"), os.environ if environ is None else environ)
    if shard is not None:
        check_within(azure.subscriptions if azure else None, shard, "azure.subscriptions")
        azure = replace(azure, shard=shard.subscriptions) if azure else None
        check_within(trust.subscriptions, shard, "trust.subscriptions")
        trust = replace(trust, subscriptions=trust.subscriptions or tuple(sorted(shard.subscriptions)))
    policy = replace(load_policy(raw), queue_template=queues.template,
                     acknowledge=bool(azure and azure.acknowledge),
                     azure_fresh_for=azure.fresh_for if azure else 0.0,
                     subscriptions=shard.subscriptions if shard else frozenset())
    return ServiceSettings(
        name=name, instance=instance, eventhub=load_eventhub(_grouped(_table(raw, "eventhub"), shard)),
        storage=_storage(_table(raw, "storage")), queues=queues,
        key_file=key_file, key_vault=key_vault, api=_api(_table(raw, "api")),
        policy=policy, azure=azure,
        log_format=as_choice(telemetry.get("log_format", "auto"), "telemetry.log_format", LOG_FORMATS),
        log_level=as_choice(telemetry.get("log_level", "info"), "telemetry.log_level", LOG_LEVELS),
        web=load_web(raw.get("web")), notify=load_notify(raw.get("notify")),
        trust=trust, limits=load_limits(raw.get("limits")), shard=shard,
        gates=load_gates(raw.get("gates"), azure is not None),
    )


def _grouped(hub: Any, shard: ShardSettings | None) -> Any:
    """A hub's table with the shard's own consumer group when it names none (config/shard.py)."""
    if shard is None or not isinstance(hub, dict) or "consumer_group" in hub:
        return hub
    return {**hub, "consumer_group": shard.consumer_group}


def _sharded(azure: Any, shard: ShardSettings | None) -> Any:
    """``[azure]`` of a shard: its subscriptions default to the shard's, its feed's consumer group too."""
    if shard is None or not isinstance(azure, dict):
        return azure
    azure = {**azure, "subscriptions": azure.get("subscriptions", sorted(shard.subscriptions))}
    if "feed" in azure:
        azure["feed"] = _grouped(azure["feed"], shard)
    return azure


def _table(raw: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: must be a table ([{key}])")
    return value


def _name(value: Any, where: str) -> str:
    text = as_str(value, where).strip()
    if not _NAME.match(text):
        raise ConfigError(f"{where}: {text!r} must be 1-63 letters, digits, '.', '_' or '-'")
    return text


def _duration(t: dict[str, Any], key: str, where: str, default: float, low: float, high: float) -> float:
    return parse_duration(t[key], f"{where}.{key}", low, high) if key in t else default


def _account_url(t: dict[str, Any], where: str, service: str, access: Access) -> str:
    if "account_url" in t:
        return validate_account_url(t["account_url"], f"{where}.account_url")
    if access.credential != "connection-string":
        raise ConfigError(f"{where}.account_url: missing (https://<account>.{service}.core.windows.net)")
    return ""


def _storage(t: dict[str, Any]) -> StorageSettings:
    no_unknown(t, "storage", ("account_url", "container", "lease_duration", "snapshot_interval",
                              *ACCESS_KEYS))
    access = load_access(t, "storage")
    container = as_str(t.get("container", "se-coordinator"), "storage.container").strip()
    if not _CONTAINER.match(container):
        raise ConfigError(f"storage.container: {container!r} is not a container name (3-63 lower-case "
                          "letters, digits and single hyphens)")
    return StorageSettings(
        _account_url(t, "storage", "blob", access), container, access,
        _duration(t, "lease_duration", "storage", 15.0, 15.0, 60.0),
        _duration(t, "snapshot_interval", "storage", 60.0, 5.0, 3600.0),
    )


def _queues(t: dict[str, Any]) -> QueueSettings:
    no_unknown(t, "queues", ("account_url", "queue", "message_ttl", *ACCESS_KEYS))
    access = load_access(t, "queues")
    template = validate_template(t.get("queue", "se-approvals-{vm_name}"), "queues.queue")
    return QueueSettings(_account_url(t, "queues", "queue", access), template, access,
                         _duration(t, "message_ttl", "queues", 900.0, 60.0, 86400.0))


def _api(t: dict[str, Any]) -> ApiSettings:
    no_unknown(t, "api", ("listen", "token_file", "advertise", "allowed_hosts"))
    listen = as_str(t.get("listen", DEFAULT_LISTEN), "api.listen").strip()
    host, sep, port_text = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"api.listen: {listen!r} is not host:port (e.g. {DEFAULT_LISTEN})")
    if not t.get("token_file"):
        raise ConfigError("api.token_file: missing (a file holding the control API's bearer token, "
                          "e.g. made with: head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE)")
    advertise = as_str(t.get("advertise", ""), "api.advertise").strip().rstrip("/")
    if advertise and not re.match(r"^https?://[^/\s]+\Z", advertise):
        raise ConfigError(f"api.advertise: {advertise!r} is not a base URL like http://10.0.0.5:8470")
    return ApiSettings(host, int(port_text), path(t["token_file"], "api.token_file"), advertise,
                       _host_names(t.get("allowed_hosts", []), advertise))


def _host_names(value: Any, advertise: str) -> tuple[str, ...]:
    """``[api] allowed_hosts`` (DNS names, no ports), with the host of ``advertise`` when it is a name."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError("api.allowed_hosts: must be a list of host names, e.g. [\"coordinator.internal\"]")
    names = [v.strip().lower().rstrip(".") for v in value]
    for name in names:
        if not _HOST.match(name):
            raise ConfigError(f"api.allowed_hosts: {name!r} is not a host name (no scheme, port or path)")
    shown = advertise.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]").lower() if advertise else ""
    if shown and _HOST.match(shown):
        names.append(shown)
    return tuple(dict.fromkeys(names))
