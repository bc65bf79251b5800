"""Approval queue names and addresses: pure rules shared by the agent, config and ``fleet approve``.

No Azure package and no configuration is imported here, so the configuration can validate
``[approvals.queue]`` without pulling in the consumer (or the approver behind it).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

from ...errors import ConfigError

POISON_SUFFIX = "-poison"
MAX_QUEUE_NAME = 63 - len(POISON_SUFFIX)
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
STAND_IN_VM_ID = "00000000-0000-0000-0000-000000000000"  # checks a {vm_id} template before IMDS answers


def queue_name(template: str, vm_name: str, vm_id: str = "") -> str:
    """The queue for this VM: ``template`` with ``{vm_name}`` / ``{vm_id}`` filled in, made legal.

    Storage queue names are 3-63 lowercase letters, digits and single hyphens; VM names may have
    capitals and underscores, so the result is lowercased, other characters become ``-`` and runs
    of ``-`` collapse. The coordinator (``fleet approve --vm``) applies the same function.
    """
    for name in PLACEHOLDER.findall(template):
        if name not in ("vm_name", "vm_id"):
            raise ConfigError(f"queue name template {template!r}: unknown placeholder {{{name}}} "
                              "(use {vm_name} or {vm_id})")
    if "{vm_id}" in template and not vm_id:
        raise ConfigError(f"queue name template {template!r} needs the VM id ({{vm_id}})")
    text = template.replace("{vm_name}", vm_name).replace("{vm_id}", vm_id).lower()
    text = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]", "-", text)).strip("-")
    if not 3 <= len(text) <= MAX_QUEUE_NAME:
        raise ConfigError(
            f"queue name {text!r} (from {template!r}) must be 3-{MAX_QUEUE_NAME} characters "
            f"(the poison queue adds {POISON_SUFFIX!r})"
        )
    return text


def poison_name(name: str) -> str:
    """Where refused messages go, next to the queue ``name``."""
    return name + POISON_SUFFIX


def validate_template(template: Any, where: str) -> str:
    """A queue name template that makes a legal name for any VM; ConfigError naming ``where``."""
    if not isinstance(template, str):
        raise ConfigError(f"{where}: must be a string")
    try:
        queue_name(template, "vm0", STAND_IN_VM_ID)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return template


def validate_account_url(value: Any, where: str) -> str:
    """An https URL (plain http only for a loopback host, i.e. an emulator)."""
    if not isinstance(value, str):
        raise ConfigError(f"{where}: must be a string")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: {value!r} is not an https URL")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ConfigError(f"{where}: {value!r} must use https (TLS is required)")
    return value.rstrip("/")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
