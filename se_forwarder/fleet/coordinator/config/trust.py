"""``[trust]`` in ``coordinator.toml``: whose word the coordinator takes. Validated once::

    [trust]
    coordinator_keys = []                # more public keys whose decisions are folded (base64 or PEM):
    coordinator_keys_file = ""           # ... one per line (# comments), and/or
    coordinator_keys_env = ""            # ... an environment variable (comma or space separated)
    require_signed_reports = true        # fold only reports signed with their VM's registered key;
                                         # false for a fleet mid-upgrade (fold/reports.py: unverified
                                         # reports may only make the coordinator more careful)
    attestation_roots = []               # PEM files of the roots attested documents chain to
                                         # (default: the roots Azure documents, config/anchors.py)
    attestation_intermediates = []       # PEM files of intermediates Azure's documents leave out
    fetch_intermediates = true           # else fetch a missing one from its "CA Issuers" URL
    intermediate_paths = [...]           # ... under these URL prefixes only (default: Azure's PKI
                                         # paths, DEFAULT_PATHS)
    subscriptions = []                   # registrations only from these subscriptions (default: any)
    report_skew = "1m"                   # how far a report's time may be ahead of the hub's
                                         # enqueued time (later times are taken as this)
    verify_workers = 2                   # processes verifying signatures and registrations off the
                                         # fold thread (default: the machine's cores, at most 8);
                                         # 0: the fold thread verifies everything itself

Public keys and certificates are not secrets. Files named here are read now: a file that cannot be
read or holds no certificate stops the start with one line naming the key.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ....approvals import signing
from ....errors import ConfigError
from ....validation import as_bool, as_int, as_str, no_unknown
from .anchors import Anchors, anchors, load_certificates
from .policy import parse_duration

DEFAULT_SKEW = 60.0  # s a report's time may be ahead of the hub's enqueued time
#: Where Azure's subordinate CAs are published (the "Azure Certificate Authority details" page and
#: the CA Issuers URLs of its certificates): intermediates are fetched under these prefixes only.
DEFAULT_PATHS = tuple(f"{scheme}://{path}" for path in (
    "www.microsoft.com/pkiops/certs/", "www.microsoft.com/pki/certs/", "www.microsoft.com/pki/mscorp/",
    "cacerts.digicert.com/") for scheme in ("http", "https"))
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_PATH = re.compile(r"^https?://[A-Za-z0-9._-]{1,253}(:[0-9]{1,5})?/([A-Za-z0-9._~%-]+/)*\Z")
KEYS = ("coordinator_keys", "coordinator_keys_file", "coordinator_keys_env", "require_signed_reports",
        "attestation_roots", "attestation_intermediates", "fetch_intermediates", "intermediate_paths",
        "subscriptions", "report_skew", "verify_workers")


@dataclass(frozen=True)
class TrustSettings:
    coordinator_keys: tuple[str, ...] = ()  # public key lines, checked
    require_signed_reports: bool = True
    attestation_roots: tuple[str, ...] = ()  # PEM files; none: Azure's documented roots
    attestation_intermediates: tuple[str, ...] = ()
    fetch_intermediates: bool = True
    intermediate_paths: tuple[str, ...] = DEFAULT_PATHS
    subscriptions: tuple[str, ...] | None = None  # lower case; None: any
    report_skew: float = DEFAULT_SKEW
    verify_workers: int = field(default_factory=lambda: min(os.cpu_count() or 1, 8))

    def anchors(self) -> Anchors:
        """The attestation trust anchors (Azure's roots unless files are named); ConfigError."""
        return anchors(self.attestation_roots, self.attestation_intermediates)


def load_trust(raw: Any, environ: Mapping[str, str]) -> TrustSettings:
    """``[trust]`` (absent: the defaults); ConfigError naming the key otherwise."""
    t = raw if raw is not None else {}
    if not isinstance(t, dict):
        raise ConfigError("trust: must be a table ([trust])")
    if "intermediate_hosts" in t:
        raise ConfigError("trust.intermediate_hosts: replaced by intermediate_paths, URL prefixes such as "
                          "\"http://www.microsoft.com/pkiops/certs/\" (whole hosts are no longer allowed)")
    no_unknown(t, "trust", KEYS)
    paths = _list(t, "intermediate_paths", list(DEFAULT_PATHS))
    for path in paths:
        if not _PATH.match(path):
            raise ConfigError(f"trust.intermediate_paths: {path[:80]!r} is not an http(s) URL prefix ending "
                              "in / (e.g. \"http://www.microsoft.com/pkiops/certs/\")")
    subscriptions = _list(t, "subscriptions", [])
    for sub in subscriptions:
        try:
            uuid.UUID(sub)
        except ValueError:
            raise ConfigError(f"trust.subscriptions: {sub[:80]!r} is not a subscription id") from None
    roots = tuple(_files(t, "attestation_roots"))
    intermediates = tuple(_files(t, "attestation_intermediates"))
    for where, files in (("trust.attestation_roots", roots),
                         ("trust.attestation_intermediates", intermediates)):
        for file in files:
            load_certificates(file, where)
    return TrustSettings(
        coordinator_keys=_coordinator_keys(t, environ),
        require_signed_reports=as_bool(t.get("require_signed_reports", True), "trust.require_signed_reports"),
        attestation_roots=roots, attestation_intermediates=intermediates,
        fetch_intermediates=as_bool(t.get("fetch_intermediates", True), "trust.fetch_intermediates"),
        intermediate_paths=tuple(dict.fromkeys(_lower_host(p) for p in paths)),
        subscriptions=tuple(s.lower() for s in subscriptions) or None,
        report_skew=parse_duration(t["report_skew"], "trust.report_skew", 0.0, 3600.0)
        if "report_skew" in t else DEFAULT_SKEW,
        **({"verify_workers": as_int(t["verify_workers"], "trust.verify_workers", 0, 64)}
           if "verify_workers" in t else {}),
    )


def _lower_host(prefix: str) -> str:
    scheme, rest = prefix.split("://", 1)
    host, path = rest.split("/", 1)
    return f"{scheme.lower()}://{host.lower()}/{path}"


def _list(t: dict[str, Any], key: str, default: list[str]) -> list[str]:
    value = t.get(key, default)
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"trust.{key}: must be a list of strings")
    return [v.strip() for v in value]


def _files(t: dict[str, Any], key: str) -> list[str]:
    return [str(Path(v).expanduser()) for v in _list(t, key, [])]


def _coordinator_keys(t: dict[str, Any], environ: Mapping[str, str]) -> tuple[str, ...]:
    """``coordinator_keys``: the public keys (base64 of the raw 32 bytes) read from the list, the file
    and the variable given, checked now; () when none is given."""
    listed = t.get("coordinator_keys", [])
    if not isinstance(listed, list) or not all(isinstance(k, str) for k in listed):
        raise ConfigError("trust.coordinator_keys: must be a list of public keys (base64 or PEM)")
    texts = [("trust.coordinator_keys", "\n".join(listed))] if listed else []
    if t.get("coordinator_keys_file"):
        given = as_str(t["coordinator_keys_file"], "trust.coordinator_keys_file").strip()
        file = str(Path(given).expanduser())
        try:
            texts.append((f"trust.coordinator_keys_file {file}", Path(file).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
            raise ConfigError(f"trust.coordinator_keys_file: {file} cannot be read ({why})") from None
    env = as_str(t.get("coordinator_keys_env", ""), "trust.coordinator_keys_env").strip()
    if env:
        if not _ENV.match(env):
            raise ConfigError(f"trust.coordinator_keys_env: {env[:60]!r} is not an environment variable name")
        if not environ.get(env, "").strip():
            raise ConfigError(f"trust.coordinator_keys_env: the environment variable {env} is not set "
                              "or empty")
        texts.append((f"trust.coordinator_keys_env ({env})", environ[env]))
    keys = [key for where, text in texts for key in signing.parse_public_keys(text, where)]
    return tuple(dict.fromkeys(signing.public_key_line(k) for k in keys))
