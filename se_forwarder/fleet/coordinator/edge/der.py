"""DER elements read by their offsets and written in the shortest form, as edge/signed_data.py needs
them. Pure.

asn1crypto's parser copies everything after an element to read it; ``header_at`` reads an element's
header where it lies, as asn1crypto reads it (``tests/coordinator/test_signed_data.py`` compares
the two on any bytes), and ``elements`` the elements one after another.
"""

from __future__ import annotations

Span = tuple[int, int, int, int]  # its first byte, where it begins, where its contents begin, its end
SEQUENCE_BYTE, SET_BYTE, ZERO_BYTE, INTEGER_BYTE, OCTETS_BYTE = 0x30, 0x31, 0xA0, 0x02, 0x04


def elements(data: bytes, at: int, end: int) -> list[Span]:
    """The elements from ``at`` to ``end`` of ``data``, one after another, as spans (``header_at``)."""
    out: list[Span] = []
    while at < end:
        first, start, stop = header_at(data, at, end)
        out.append((first, at, start, stop))
        at = stop
    return out


def header_at(data: bytes, at: int, end: int | None = None) -> tuple[int, int, int]:
    """The element at ``at`` of ``data`` (up to ``end``), as asn1crypto's parser.parse reads it:
    its first byte, where its contents begin and where it ends; ValueError when it is truncated,
    of an indefinite length or of a tag number above 30 (never in a document of the usual shape:
    signed_data.py reads those whole)."""
    end = len(data) if end is None else end
    if at + 2 > end:
        raise ValueError("truncated")
    first, length = data[at], data[at + 1]
    if first & 31 == 31:
        raise ValueError("a high tag number")
    start = at + 2
    if length & 0x80:
        octets = length & 0x7F
        if not octets:
            raise ValueError("an indefinite length")
        if start + octets > end:
            raise ValueError("truncated")
        length = int.from_bytes(data[start:start + octets], "big")
        start += octets
    stop = start + length
    if stop > end:
        raise ValueError("truncated")
    return first, start, stop


def encoded(first: int, contents: bytes) -> bytes:
    """The DER element of ``contents`` with the first byte ``first``, its length in the shortest form."""
    size = len(contents)
    if size < 0x80:
        return bytes((first, size)) + contents
    octets = (size.bit_length() + 7) // 8
    return bytes((first, 0x80 | octets)) + size.to_bytes(octets, "big") + contents
