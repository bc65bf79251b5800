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


_LEAVES = frozenset((str, int, bool, type(None)))


def plain(value: Any) -> bool:
    """Whether ``value`` is made of dicts, lists, strings, integers, booleans and None only (no
    float, nothing else), so that orjson and ``json`` agree on it."""
    stack = [value]
    pop, push, leaves = stack.pop, stack.extend, _LEAVES
    while stack:
        item = pop()
        kind = type(item)
        if kind is dict:
            push(item.values())
        elif kind is list:
            push(item)
        elif kind not in leaves:
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
