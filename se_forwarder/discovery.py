"""Where IMDS is, for VMs outside a virtual network: DHCP option 245 in the lease files.

VMs in a virtual network reach the metadata service at 169.254.169.254. Others (classic VMs, cloud
services) must find the host address themselves: Azure's DHCP server hands it out as the
proprietary option 245 (the wire server's IPv4 address, usually 168.63.129.16), which the DHCP
clients keep in their lease files:

- dhclient (also NetworkManager with its dhclient backend): ``option unknown-245 a8:3f:81:10;``
  inside ``lease { ... }`` blocks, the newest block last; the value may also be a quoted 4-byte
  string with octal escapes;
- systemd-networkd (also NetworkManager's internal client, whose files use the same
  ``KEY=VALUE`` form): ``OPTION_245=A83F8110``.

``imds.url = "discover"`` takes the address from the most recently written lease file that has
one (its last lease), and falls back to 169.254.169.254 when none does. The parsers are pure and
never raise on a file's content: an unreadable or strange file is simply not an answer.
"""

from __future__ import annotations

import glob
import ipaddress
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DISCOVER = "discover"
FALLBACK_URL = "http://169.254.169.254"

#: Where DHCP clients keep their leases (``imds.lease_files`` replaces this list).
LEASE_FILES: tuple[str, ...] = (
    "/var/lib/dhcp/dhclient*.leases",  # Debian, Ubuntu (dhclient)
    "/var/lib/dhclient/*.lease",  # RHEL, CentOS (dhclient)
    "/var/lib/dhclient/*.leases",
    "/var/lib/NetworkManager/*.lease",  # NetworkManager (dhclient-*.lease and internal-*.lease)
    "/run/systemd/netif/leases/*",  # systemd-networkd
)
MAX_LEASE_BYTES = 1024 * 1024

_DHCLIENT_OPTION = re.compile(r"^\s*option\s+unknown-245\s+(?P<value>.+?)\s*;\s*$")
_KEY_VALUE = re.compile(r"^\s*(?:OPTION_245|option_245|private_245)\s*=\s*(?P<value>\S+)\s*$")


@dataclass(frozen=True)
class Discovery:
    """The base URL to use and where it came from (for the log line)."""

    url: str
    address: str | None
    lease_file: str | None

    def describe(self) -> str:
        if self.address is None:
            return (f"no DHCP option 245 in the lease files; using {self.url} "
                    "(the address inside a virtual network)")
        return f"{self.url} (wire server from DHCP option 245 in {self.lease_file})"


def decode_option(value: str) -> str | None:
    """An option-245 value as written by dhclient or networkd -> dotted IPv4, or None.

    ``a8:3f:81:10`` and ``a8:3f:81:10`` with one-digit parts (``a:3f:81:10``), ``A83F8110`` and a
    quoted 4-byte string (``"\\250?\\201\\020"``) are understood.
    """
    text = value.strip()
    raw: bytes | None = None
    if len(text) >= 2 and text[0] == text[-1] == '"':
        raw = _unescape(text[1:-1])
    elif ":" in text:
        parts = text.split(":")
        if len(parts) == 4 and all(re.fullmatch(r"[0-9A-Fa-f]{1,2}", p) for p in parts):
            raw = bytes(int(p, 16) for p in parts)
    elif re.fullmatch(r"[0-9A-Fa-f]{8}", text):
        raw = bytes.fromhex(text)
    if raw is None or len(raw) != 4:
        return None
    address = ipaddress.IPv4Address(raw)
    if address.is_unspecified or address.is_multicast or address.is_reserved:
        return None
    return str(address)


def _unescape(text: str) -> bytes | None:
    """dhclient's quoted strings: printable characters, ``\\ooo`` octal and ``\\x`` escapes."""
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            octal = re.match(r"[0-7]{1,3}", text[i + 1:])
            if octal:
                number = int(octal.group(0), 8)
                if number > 255:
                    return None
                out.append(number)
                i += 1 + len(octal.group(0))
                continue
            out.extend(text[i + 1].encode("latin-1", "replace"))
            i += 2
            continue
        if ord(ch) > 255:
            return None
        out.append(ord(ch))
        i += 1
    return bytes(out)


def option_245(content: str) -> str | None:
    """The address in one lease file's text (the last lease that has one), or None."""
    found: str | None = None
    for line in content.splitlines():
        match = _DHCLIENT_OPTION.match(line) or _KEY_VALUE.match(line)
        if match:
            address = decode_option(match.group("value"))
            if address is not None:
                found = address
    return found


def _candidates(patterns: Iterable[str]) -> list[str]:
    paths: set[str] = set()
    for pattern in patterns:
        paths.update(p for p in glob.glob(os.path.expanduser(pattern)) if os.path.isfile(p))

    def mtime(path: str) -> float:
        try:
            return os.stat(path).st_mtime
        except OSError:
            return 0.0

    return sorted(paths, key=lambda p: (mtime(p), p), reverse=True)  # newest first


def discover(lease_files: Sequence[str] | None = None) -> Discovery:
    """The IMDS base URL: option 245 of the newest lease file that has it, else 169.254.169.254."""
    for path in _candidates(LEASE_FILES if lease_files is None else lease_files):
        try:
            with open(path, "rb") as fh:
                content = fh.read(MAX_LEASE_BYTES).decode("utf-8", "replace")
        except OSError:
            continue
        address = option_245(content)
        if address is not None:
            return Discovery(f"http://{address}", address, path)
    return Discovery(FALLBACK_URL, None, None)
