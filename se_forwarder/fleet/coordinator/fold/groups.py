"""The fold's co-reception sets: VMs that reported the same EventIds, joined as they are read (a
learned group, decide/scopes.py). Pure."""

from __future__ import annotations


class Groups:
    """VMs that reported the same EventIds, as disjoint sets (union by size, path halving), with
    each set's members (``members``: what decide/scopes.py looks at when one of them changed), and
    the roots of the sets joined or split since view/digest.py last looked (``dirty``)."""

    __slots__ = ("dirty", "parent", "sets")

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.sets: dict[str, list[str]] = {}  # root -> its members (sets of two or more)
        self.dirty: set[str] | None = None  # None: nobody looks

    def find(self, key: str) -> str:
        parent = self.parent
        if key not in parent:
            return key
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    def union(self, a: str, b: str) -> bool:
        """Join the sets of ``a`` and ``b``; True when they were apart."""
        for key in (a, b):
            if key not in self.parent:
                self.parent[key] = key
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        na, nb = len(self.sets.get(ra, ())) or 1, len(self.sets.get(rb, ())) or 1
        if na < nb or (na == nb and rb < ra):
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.sets.setdefault(ra, [ra]).extend(self.sets.pop(rb, [rb]))
        if self.dirty is not None:
            self.dirty.update((ra, rb))
        return True

    def add(self, members: list[str]) -> None:
        """A set read back (a snapshot's: ``components``): what joining each of ``members`` to the
        first would make, made at once where they are sorted and none is in a set yet."""
        parent = self.parent
        if len(members) < 2 or sorted(set(members)) != members or not parent.keys().isdisjoint(members):
            for other in members[1:]:
                self.union(members[0], other)
            return
        root = members[0]
        parent.update(dict.fromkeys(members, root))
        self.sets[root] = list(members)
        if self.dirty is not None:
            self.dirty.update(members)

    def drop(self, gone: set[str]) -> list[str]:
        """Forget the VMs of ``gone`` (retention.py); the others of their sets, which are rejoined."""
        rest: list[str] = []
        for root in {self.find(key) for key in gone if key in self.parent}:
            if self.dirty is not None:
                self.dirty.add(root)
            members = self.sets.pop(root, None) or [root]
            for member in members:
                del self.parent[member]
            alive = [m for m in members if m not in gone]
            for other in alive[1:]:
                self.union(alive[0], other)
            rest += alive
        return rest

    def members(self, key: str) -> list[str]:
        """Every VM of ``key``'s set (``key`` alone when it shares none)."""
        return self.sets.get(self.find(key)) or [key]

    def components(self) -> list[list[str]]:
        """The sets of two or more VMs, each sorted, in sorted order (a canonical form)."""
        return sorted(sorted(members) for members in self.sets.values())
