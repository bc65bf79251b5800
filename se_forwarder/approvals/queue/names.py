"""Approval queue names and addresses: pure rules shared by the agent, config and ``fleet approve``.

No Azure package and no configuration is imported here, so the configuration can validate
``[approvals.queue]`` without pulling in the consumer (or the approver behind it).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from ...errors import ConfigError

POISON_SUFFIX = "-poison"
MAX_QUEUE_NAME = 63 - len(POISON_SUFFIX)
PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
STAND_IN_VM_ID = "00000000-0000-0000-0000-000000000000"  # checks a {vm_id} template before IMDS answers
HASH_LENGTH = 13  # uniqueString's length
HASHED = re.compile(r"-[a-z2-7]{13}\Z")
_BASE32 = "abcdefghijklmnopqrstuvwxyz234567"
_M32 = 0xFFFFFFFF


def _legal(text: str) -> str:
    """Lowercase letters, digits and single hyphens: every other run of characters is one ``-``,
    none at either end (what ``join(filter(split(...)), '-')`` does in the Bicep)."""
    return "-".join(part for part in re.split(r"[^a-z0-9]+", text.lower()) if part)


def queue_name(template: str, vm_name: str, vm_id: str = "") -> str:
    """The queue for this VM: ``template`` with ``{vm_name}`` / ``{vm_id}`` filled in, made legal.

    Storage queue names are 3-63 lowercase letters, digits and single hyphens (56 here: the
    poison queue adds ``-poison``). The rule, shared with the Bicep (``bicep/main.bicep``,
    ``queueNames``) and ``fleet approve --vm``:

    - the VM name is lowercased (Azure VM names ignore case); every run of other characters than
      letters and digits becomes one ``-``, none at either end;
    - when that changed the name (``web_01``, ``web.01``) or the queue name would be too long, the
      VM name part is cut to fit and ``-`` plus ``uniqueString(lowercased VM name)`` (13 characters,
      as ARM computes it) is appended, so two VMs never share a queue;
    - otherwise the name is the template filled in (``se-approvals-web-01``).
    """
    for name in PLACEHOLDER.findall(template):
        if name not in ("vm_name", "vm_id"):
            raise ConfigError(f"queue name template {template!r}: unknown placeholder {{{name}}} "
                              "(use {vm_name} or {vm_id})")
    if "{vm_id}" in template and not vm_id:
        raise ConfigError(f"queue name template {template!r} needs the VM id ({{vm_id}})")
    lowered = vm_name.lower()
    part = _legal(lowered)
    fixed = template.replace("{vm_id}", vm_id)
    text = _legal(fixed.replace("{vm_name}", part))
    if "{vm_name}" in template and (part != lowered or len(text) > MAX_QUEUE_NAME):
        suffix = "-" + unique_string(lowered)
        for keep in range(len(part), -1, -1):
            text = _legal(fixed.replace("{vm_name}", part[:keep])) + suffix
            if len(text) <= MAX_QUEUE_NAME:
                break
        text = text.lstrip("-")
    if not 3 <= len(text) <= MAX_QUEUE_NAME:
        raise ConfigError(
            f"queue name {text!r} (from {template!r}) must be 3-{MAX_QUEUE_NAME} characters "
            f"(the poison queue adds {POISON_SUFFIX!r})"
        )
    return text


def names_the_vm(template: str) -> bool:
    """Whether the template gives each VM a queue of its own (``{vm_name}`` or ``{vm_id}`` in it);
    without either, every VM of the fleet shares one queue."""
    return "{vm_name}" in template or "{vm_id}" in template


def sharing_peers(template: str, vm_name: str, peers: Iterable[str]) -> list[str]:
    """The names among ``peers`` (VM names, as an event's Resources gives them) whose queue under
    ``template`` is this VM's too. A peer named like this VM but for case is taken to be this VM;
    a template with ``{vm_id}`` gives every VM its own queue."""
    if "{vm_id}" in template:
        return []
    try:
        mine = queue_name(template, vm_name)
    except ConfigError:
        return []
    out = []
    for peer in dict.fromkeys(peers):
        if peer.lower() == vm_name.lower():
            continue
        try:
            if queue_name(template, peer) == mine:
                out.append(peer)
        except ConfigError:
            continue
    return out


def vm_for_queue(template: str, queue: str) -> str | None:
    """The VM whose queue ``queue`` is under ``template`` (lowercased), or None when the name does
    not tell: no ``{vm_name}`` in the template, another prefix or suffix, or a hashed name
    (the VM name was changed or cut to make it, so it cannot be read back)."""
    if template.count("{vm_name}") != 1 or len(PLACEHOLDER.findall(template)) != 1:
        return None
    head, tail = (_legal(t) for t in template.split("{vm_name}"))
    head = head + "-" if head else ""
    tail = "-" + tail if tail else ""
    if not (queue.startswith(head) and queue.endswith(tail)) or len(queue) <= len(head) + len(tail):
        return None
    candidate = queue[len(head):len(queue) - len(tail)]
    if HASHED.search(queue) or _legal(candidate) != candidate:
        return None
    try:
        return candidate if queue_name(template, candidate) == queue else None
    except ConfigError:
        return None


def _rotl(value: int, count: int) -> int:
    return ((value << count) | (value >> (32 - count))) & _M32


def _fmix(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def _murmur64(data: bytes) -> int:
    """The 64-bit Murmur variant behind ARM's ``uniqueString`` (two 32-bit lanes, seed 0)."""
    c1, c2, c3, c4 = 0x239B961B, 0xAB0E9789, 0x561CCD1B, 0x0BCAA747
    h1 = h2 = 0
    n, i = len(data), 0
    while i + 8 <= n:
        k1 = int.from_bytes(data[i:i + 4], "little")
        k2 = int.from_bytes(data[i + 4:i + 8], "little")
        h1 ^= _rotl((k1 * c1) & _M32, 15) * c2 & _M32
        h1 = (_rotl(h1, 19) + h2) & _M32
        h1 = (h1 * 5 + c3) & _M32
        h2 ^= _rotl((k2 * c2) & _M32, 17) * c1 & _M32
        h2 = (_rotl(h2, 13) + h1) & _M32
        h2 = (h2 * 5 + c4) & _M32
        i += 8
    tail = n - i
    if tail > 0:
        k1 = int.from_bytes(data[i:i + min(tail, 4)], "little")
        h1 ^= _rotl((k1 * c1) & _M32, 15) * c2 & _M32
        if tail > 4:
            k2 = int.from_bytes(data[i + 4:n], "little")
            h2 ^= _rotl((k2 * c2) & _M32, 17) * c1 & _M32
    h1 ^= n & _M32
    h2 ^= n & _M32
    h1 = (h1 + h2) & _M32
    h2 = (h2 + h1) & _M32
    h1, h2 = _fmix(h1), _fmix(h2)
    h1 = (h1 + h2) & _M32
    h2 = (h2 + h1) & _M32
    return (h2 << 32) | h1


def unique_string(*values: str) -> str:
    """ARM/Bicep ``uniqueString(values...)``: the values joined by ``-``, hashed, 13 base32
    characters (checked against values Azure returned, in the tests)."""
    h = _murmur64("-".join(values).encode("utf-8"))
    return "".join(_BASE32[(h >> (59 - 5 * i)) & 31] if i < 12 else _BASE32[(h << 1) & 31]
                   for i in range(HASH_LENGTH))


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
