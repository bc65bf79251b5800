"""Which VMs claim the same thing (an approval queue, a resourceId), kept as VMs come and go. Pure.

Kept by a hash of each claim, so 100,000 VMs hold no second copy of 100,000 texts: a hash names
one VM, or the set of VMs whose claims share it (``crowded``), which ``shared`` tells apart by the
claims themselves (equal hashes of unequal texts are not a shared claim). The hash is cut to 30
bits: an int of one digit is 32 bytes rather than 48, 3 MB less for the queues and resourceIds of
100,000 VMs, for a few hashes shared by chance (about five at that size), told apart as any other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

BITS = (1 << 30) - 1  # a claim's hash, cut to one digit of an int (module docstring)


class Claims:
    __slots__ = ("by", "crowded", "of")

    def __init__(self) -> None:
        self.of: dict[str, int] = {}  # VM key -> the hash of its claim
        self.by: dict[int, str | set[str]] = {}  # hash -> the VM, or the VMs, that claim it
        self.crowded: set[int] = set()  # hashes of several VMs

    def add(self, key: str, claim: str | None) -> int | None:
        """``key`` claims ``claim`` (None: nothing); the hash it is kept under."""
        if claim is None:
            return None
        code = hash(claim) & BITS
        self.of[key] = code
        have = self.by.get(code)
        if have is None:
            self.by[code] = key
        elif isinstance(have, set):
            have.add(key)
        elif have != key:
            self.by[code] = {have, key}
            self.crowded.add(code)
        return code

    def remove(self, key: str) -> int | None:
        """``key`` claims nothing any more; the hash it was kept under."""
        code = self.of.pop(key, None)
        if code is None:
            return None
        have = self.by[code]
        if isinstance(have, set):
            have.discard(key)
            if len(have) == 1:
                self.by[code] = next(iter(have))
                self.crowded.discard(code)
        else:
            del self.by[code]
        return code

    def holders(self, code: int) -> Iterable[str]:
        have = self.by.get(code)
        return () if have is None else (have,) if isinstance(have, str) else have

    def shared(self, claim: Callable[[str], str | None], codes: Iterable[int] | None = None
               ) -> list[tuple[str, list[str]]]:
        """(claim, its VMs, sorted) of every claim two or more VMs share, among ``codes`` (every
        crowded hash when None)."""
        out = []
        for code in self.crowded if codes is None else codes:
            if code not in self.crowded:
                continue
            same: dict[str, list[str]] = {}
            for key in self.holders(code):
                text = claim(key)
                if text is not None:
                    same.setdefault(text, []).append(key)
            out += [(text, sorted(keys)) for text, keys in same.items() if len(keys) > 1]
        return sorted(out)
