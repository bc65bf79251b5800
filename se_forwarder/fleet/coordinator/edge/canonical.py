"""A signed event's text read and its canonical form made, with orjson where that gives the same. Pure.

What an agent signs is ``approvals/signing.canonical`` of its event: every member but
``signature``, keys sorted, compact, ASCII (``json.dumps``). Making that form again is a fifth
of a report's verification in a worker, and reading the text with ``json.loads`` another tenth;
orjson does each in a fifth of the time. The two libraries agree on every JSON value but these,
so any event holding one of them is read and put in canonical form by ``json`` as before:

- a float (orjson writes ``1e-7`` where ``json`` writes ``1e-07``; it reads an integer beyond 64
  bits as a float, where ``json`` keeps it exact), or any other type than dict, list, string,
  integer, boolean and None (a tuple, a subclass);
- a character outside ASCII, or DEL (``json`` escapes them as ``\\uXXXX``, orjson writes them as
  they are), found in orjson's output;
- anything orjson will not read or write (a lone surrogate, ``NaN``, an integer beyond 64 bits).

So ``canonical(event)`` is byte for byte ``signing.canonical(event)`` and ``read(text)`` gives
``json.loads(text)`` for every text (``tests/coordinator/test_canonical.py``, property-based).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from ....approvals import signing

_SORTED = orjson.OPT_SORT_KEYS
_JSON_ERRORS = (orjson.JSONDecodeError, TypeError)


def plain(value: Any) -> bool:
    """Whether ``value`` is made of dicts, lists, strings, integers, booleans and None only (no
    float, nothing else), so that orjson and ``json`` agree on it. A value nested deeper than the
    interpreter's recursion allows is not (orjson reads none deeper than 1,024)."""
    try:
        return _plain(value)
    except RecursionError:
        return False


def _plain(value: Any) -> bool:
    # Recursive, with the common leaves tested first: about half the time of a loop over a stack
    # (a report's 30 to 40 values, looked at on the hub reader's thread for every event).
    kind = type(value)
    if kind is dict:
        value = value.values()
    elif kind is not list:
        return kind is str or kind is int or kind is bool or value is None
    for item in value:
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if (kind is dict or kind is list) and _plain(item):
            continue
        return False
    return True


def read(text: bytes | str) -> tuple[Any, bool]:
    """``json.loads(text)``, read by orjson when that gives the same (module docstring), and whether
    it is ``plain`` (to give ``canonical``); raises what ``json.loads`` raises."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text), False
    if plain(value):
        return value, True
    return json.loads(text), False


def canonical(message: Mapping[str, Any], checked: bool = False) -> bytes:
    """``signing.canonical(message)``, made by orjson where it gives the same bytes (module
    docstring); ``checked``: ``plain(message)`` is known to hold (``read`` said so). Raises what
    ``signing.canonical`` raises."""
    unsigned = {k: v for k, v in message.items() if k != signing.SIGNATURE_ATTRIBUTE}
    if checked or plain(unsigned):
        try:
            out = orjson.dumps(unsigned, option=_SORTED)
        except _JSON_ERRORS:
            pass
        else:
            if out.isascii() and b"\x7f" not in out:
                return out
    return signing.canonical(message)
