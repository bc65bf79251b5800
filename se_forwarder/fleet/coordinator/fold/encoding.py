"""Compact JSON in UTF-8 for the snapshot's lines (fold/snapshot.py) and the digest's records
(view/digest.py): by orjson, five to eight times the standard library's encoding here. Pure."""

from __future__ import annotations

import json
from typing import Any

import orjson

_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_SORTED_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=str, sort_keys=True)


def encode(value: Any, sort: bool = False) -> bytes:
    """``value`` as compact JSON in UTF-8 (``sort``: members of objects sorted and anything else
    written as text, a canonical form for view/digest.py): by orjson, five to eight times the
    standard library's speed here; by the standard library for what orjson does not take (an
    integer beyond 64 bits, which a held report may carry), so equal values give equal bytes."""
    try:
        if sort:
            return orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return (_SORTED_ENCODER if sort else _ENCODER).encode(value).encode("utf-8")
