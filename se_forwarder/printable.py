"""Text from outside (VMs, the hub, IMDS) made inert before a terminal or a log line shows it. Pure.

A VM's name, an EventId or a tag value is whatever an agent sent. Shown raw, it could clear the
screen, move the cursor, forge a hyperlink (OSC 8), rewrite a line with a carriage return, add a
fake line, or reverse what follows it (Unicode bidirectional controls). ``CONTROLS`` matches every
character that does such things: C0 and C1 control characters, DEL, and the bidirectional and
zero-width formatting characters. Tab, CR and LF are among them: a table cell or a log field is
one line.

- ``has_controls(text)``: whether it holds any (the fold refuses such identifiers);
- ``strip_controls(text)``: each run of them becomes one space, for table cells and status lines;
- ``strip_tree(value)``: the same for every string in a JSON-like value (dict keys too);
- ``escape_controls(text)``: each becomes a visible escape (``\\x1b``, ``\\u202e``), for log lines,
  where the exact text matters and nothing may be lost.
"""

from __future__ import annotations

import re
from typing import Any

CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_RUNS = re.compile(CONTROLS.pattern + "+")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def has_controls(text: str) -> bool:
    return CONTROLS.search(text) is not None


def strip_controls(text: str) -> str:
    """``text`` with each run of control characters replaced by one space."""
    return _RUNS.sub(" ", text) if CONTROLS.search(text) else text


def escape_controls(text: str) -> str:
    """``text`` with each control character written as an escape (``\\n``, ``\\x1b``, ``\\u202e``)."""
    return CONTROLS.sub(_escape, text) if CONTROLS.search(text) else text


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def strip_tree(value: Any) -> Any:
    """A copy of a JSON-like ``value`` with ``strip_controls`` applied to every string in it."""
    if isinstance(value, str):
        return strip_controls(value)
    if isinstance(value, dict):
        return {strip_tree(k): strip_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strip_tree(v) for v in value]
    return value
