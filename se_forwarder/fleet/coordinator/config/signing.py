"""``[signing]`` of ``coordinator.toml``: where the coordinator's Ed25519 private key comes from::

    [signing]
    key_file = "/etc/se-forwarder/coordinator-signing.key"     # made by 'se-forwarder fleet keygen' ...
    # key_vault_secret = "https://<vault>.vault.azure.net/secrets/<name>"   # ... or a Key Vault secret
    # credential = "managed-identity"     # managed-identity | default: who reads the secret
    # client_id = ""                      # a user-assigned identity's client id
    # ca_file = ""                        # a PEM bundle to trust instead of the system's (tests)

Exactly one of ``key_file`` and ``key_vault_secret``. Key Vault has no Ed25519 keys, so the Bicep
keeps the key's PEM as a secret (``az keyvault secret set --file``); the coordinator reads it once
at start with its own identity (azure/keyvault.py: the role Key Vault Secrets User), keeps it in
memory only and never logs it. The secret's URL names the vault, the secret and optionally a
version (``.../secrets/<name>/<version>``; without one, the current version). Its host is a Key
Vault's (``*.vault.azure.net`` and the other clouds' suffixes), or a loopback address (tests).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ....errors import ConfigError
from ....validation import as_choice, as_str, is_loopback, no_unknown
from .hub import Access, path

KEYS = ("key_file", "key_vault_secret", "credential", "client_id", "ca_file")
VAULT_SUFFIXES = (".vault.azure.net", ".vault.azure.cn", ".vault.usgovcloudapi.net",
                  ".vault.microsoftazure.de")
_SECRET_PATH = re.compile(r"^/secrets/(?P<name>[0-9A-Za-z-]{1,127})(?:/(?P<version>[0-9A-Za-z]{1,64}))?/?\Z")


@dataclass(frozen=True)
class VaultSecret:
    """A Key Vault secret: the vault's URL, the secret's name and version ("" for the current one)."""

    vault_url: str
    name: str
    version: str = ""
    access: Access = field(default_factory=Access)
    ca_file: str = ""

    @property
    def url(self) -> str:
        return f"{self.vault_url}/secrets/{self.name}" + (f"/{self.version}" if self.version else "")

    @property
    def loopback(self) -> bool:
        return is_loopback(urlsplit(self.vault_url).hostname or "")


def load_signing(t: dict[str, Any]) -> tuple[str, VaultSecret | None]:
    """(key file, Key Vault secret): exactly one of them given (module docstring)."""
    no_unknown(t, "signing", KEYS)
    given = [k for k in ("key_file", "key_vault_secret") if t.get(k)]
    if len(given) != 1:
        raise ConfigError("signing: give one of key_file (the Ed25519 private key, made with "
                          "'se-forwarder fleet keygen --out FILE') or key_vault_secret (a Key Vault secret "
                          "holding it)")
    if "key_file" in given:
        extra = [k for k in ("credential", "client_id", "ca_file") if k in t]
        if extra:
            raise ConfigError(f"signing.{extra[0]}: only with key_vault_secret")
        return path(t["key_file"], "signing.key_file"), None
    credential = as_choice(t.get("credential", "managed-identity"), "signing.credential",
                           ("managed-identity", "default"))
    client_id = as_str(t.get("client_id", ""), "signing.client_id").strip()
    ca_file = path(t["ca_file"], "signing.ca_file") if t.get("ca_file") else ""
    return "", vault_secret(t["key_vault_secret"], Access(credential, client_id), ca_file)


def vault_secret(value: Any, access: Access, ca_file: str = "") -> VaultSecret:
    where = "signing.key_vault_secret"
    text = as_str(value, where).strip()
    parts = urlsplit(text)
    found = _SECRET_PATH.match(parts.path)
    host = (parts.hostname or "").lower()
    if parts.scheme != "https" or found is None or parts.query or parts.fragment or parts.username:
        raise ConfigError(f"{where}: {text[:120]!r} is not a Key Vault secret's URL "
                          "(https://<vault>.vault.azure.net/secrets/<name>[/<version>])")
    if not host.endswith(VAULT_SUFFIXES) and not is_loopback(host):
        hosts = ", ".join("*" + suffix for suffix in VAULT_SUFFIXES)
        raise ConfigError(f"{where}: {host!r} is not a Key Vault's host ({hosts})")
    return VaultSecret(f"https://{parts.netloc}", found["name"], found["version"] or "", access, ca_file)
