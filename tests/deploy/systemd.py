"""What the systemd unit tests share: the exposure the unit must stay under and its parsed settings."""

from __future__ import annotations

from pathlib import Path

MAX_EXPOSURE = 1.5


def unit_settings(path: Path) -> dict[str, list[str]]:
    """Key -> every value it is given in the unit (systemd keys may repeat)."""
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        settings.setdefault(key.strip(), []).append(value.strip())
    return settings
