"""The coordinator's signing key read from a Key Vault secret (``[signing] key_vault_secret``).

``signing_key(secret)`` reads the secret once, with the identity ``[signing] credential`` names,
through azure-keyvault-secrets (imported here only; the ``fleet`` extra installs it), and returns
the Ed25519 private key its PEM holds. The value is never logged, and no error quotes it; each
failure is one ConfigError line saying what to do: Key Vault's ``Forbidden`` (the identity lacks
Key Vault Secrets User on the vault, or its firewall refuses this network), ``SecretNotFound``,
a disabled secret, a credential with no token, a vault that does not answer.

TLS is verified (``ca_file`` instead of the system's roots, for tests and private clouds). The SDK
checks that the vault's authentication challenge names a Key Vault domain of the vault's host; a
loopback vault (a test's stand-in) cannot, so only there is that check left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....approvals import signing
from ....errors import ConfigError, one_line
from ....sinks.azure_common import scrub, token_credential
from ..config.signing import VaultSecret

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

WHERE = "signing.key_vault_secret"
TIMEOUT = 20  # s per request


def signing_key(secret: VaultSecret) -> Ed25519PrivateKey:
    """The private key in ``secret`` (module docstring); ConfigError in one line otherwise."""
    text = read(secret)
    return signing.load_private_key(text, f"{WHERE} {secret.url}")


def read(secret: VaultSecret) -> str:
    """The secret's value; ConfigError in one line otherwise."""
    try:
        from azure.keyvault.secrets import SecretClient
    except ImportError:
        raise ConfigError(f"{WHERE}: reading Key Vault needs azure-keyvault-secrets: pip install "
                          "'se-forwarder[fleet]'") from None
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError

    options = {"connection_verify": secret.ca_file or True, "connection_timeout": TIMEOUT,
               "read_timeout": TIMEOUT, "retry_total": 2}
    if secret.loopback:
        options["verify_challenge_resource"] = False
    identity = token_credential(secret.access.credential, secret.access.client_id or None)
    client = SecretClient(secret.vault_url, identity, **options)
    try:
        found = client.get_secret(secret.name, secret.version or None)
    except ClientAuthenticationError as exc:
        if getattr(exc, "status_code", None) in (401, 403):
            raise ConfigError(_refused(secret, exc)) from None
        said = scrub(one_line(exc))[:200]
        raise ConfigError(f"{WHERE}: the credential got no token for Key Vault: {said}") from None
    except HttpResponseError as exc:
        raise ConfigError(_refused(secret, exc)) from None
    except ServiceRequestError as exc:
        said = scrub(one_line(exc))[:200]
        raise ConfigError(f"{WHERE}: {secret.vault_url} does not answer: {said}") from None
    finally:
        client.close()
    if found.properties.enabled is False or not found.value:
        raise ConfigError(f"{WHERE}: the secret {secret.url} is disabled or empty")
    return found.value


def _refused(secret: VaultSecret, exc: BaseException) -> str:
    status, code = getattr(exc, "status_code", None), getattr(exc, "error_code", None) or ""
    inner = ""
    error = getattr(exc, "error", None)
    if error is not None and getattr(error, "innererror", None):
        inner = str(error.innererror.get("code", "")) if isinstance(error.innererror, dict) else ""
    if status == 404:
        return f"{WHERE}: Key Vault has no secret {secret.url} (404 {code or 'SecretNotFound'})"
    if status == 403 and "Firewall" in (inner + code + str(exc)):
        return (f"{WHERE}: the key vault's firewall refuses this network (403 {inner or code}): allow this "
                "VM's subnet or address, or reach it through a private endpoint")
    if status in (401, 403):
        return (f"{WHERE}: Key Vault refuses the coordinator's identity ({status} {inner or code}): give "
                "it Key Vault Secrets User on the vault")
    return f"{WHERE}: Key Vault answered {status} {code}: {scrub(one_line(exc))[:200]}"
