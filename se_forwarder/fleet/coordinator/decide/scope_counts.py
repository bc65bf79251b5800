"""How many VMs each scope holds, counted per group where a scope is named after one. Pure.

A VM's scopes (scopes.py's table) are of two sorts. Those named after its group (``group``,
``fault_domain``, ``update_domain``) are counted per group: a group of one VM is that VM alone (its
domains are its ``Shape``'s), a larger one its ``Members``: so a VM that changes group (a learned
group named anew, scope_index.py) is counted out of one group and into another without a scope key
made, and a VM that shares no event holds no count of its own. The others (fleet, scale set, zone,
resource group, tags), shared by many VMs, are counted per key. A scope is its key: two groups whose
names and domains spell one key (``fault_domain:a/b`` + ``/c`` and ``fault_domain:a`` + ``/b/c``)
count in one scope, as every key is looked up by the groups its text can name.

A scope's inventory is its size less the VMs that claim it beyond their accepted placements
(``out``: scopes.py's ``outside``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..config.policy import Budget
from ..fold.state import Vm
from .placement import FLEET, scope_keys

__all__ = ["FLEET", "Counts", "ScopesOf", "Shape", "Views"]

GROUP, FAULT, UPDATE = 0, 1, 2  # the parts of a Shape that are named after the group
_MARK = {"group": GROUP, "fault_domain": FAULT, "update_domain": UPDATE}
_PARTS = {"group": GROUP, "fault_domain": FAULT, "update_domain": UPDATE}
_KIND = ("group", "fault_domain", "update_domain")
Look = tuple[int, int, str | None, Budget | None]  # a scope's size, inventory, kind, budget
MEMO = 1 << 16  # scopes whose Look is kept at most


class Shape:
    """Where a VM is apart from its group, shared by every VM placed alike: its scopes in
    placement.scope_keys' order with ``GROUP``, ``FAULT`` and ``UPDATE`` where its group's are
    (``parts``), those with a budget (``budgeted``), the others' keys and kinds (``fixed``,
    ``kinds``), and its fault and update domains (lower case; "" when it has none)."""

    __slots__ = ("budgeted", "fault", "fixed", "kinds", "parts", "slashed", "update", "where")

    def __init__(self, parts: tuple[str | int, ...], kinds: tuple[str, ...], by_kind: Mapping[str, Budget],
                 fault: str, update: str) -> None:
        self.parts, self.fault, self.update = parts, fault, update
        self.slashed = "/" in fault or "/" in update
        self.budgeted = tuple(p for p, kind in zip(parts, kinds, strict=True) if kind in by_kind)
        fixed = [(p, kind) for p, kind in zip(parts, kinds, strict=True) if isinstance(p, str)]
        self.fixed = tuple(p for p, _ in fixed)
        self.kinds = tuple(kind for _, kind in fixed)
        # (position, part) of the group's scopes in ``parts`` and in ``budgeted``
        self.where = tuple(tuple((i, p) for i, p in enumerate(of) if isinstance(p, int))
                           for of in (self.parts, self.budgeted))

    def scopes(self, group: str, budgeted: bool = False) -> tuple[str, ...]:
        """Its scopes' keys in ``group`` (``budgeted``: those with a budget)."""
        out: list[Any] = list(self.budgeted if budgeted else self.parts)
        for i, part in self.where[budgeted]:
            out[i] = ("group:" + group if part == GROUP else
                      f"fault_domain:{group}/{self.fault}" if part == FAULT else
                      f"update_domain:{group}/{self.update}")
        return tuple(out)


class Members:
    """The counts of a group of two or more VMs: its size, and its VMs per fault and update domain."""

    __slots__ = ("faults", "size", "updates")

    def __init__(self) -> None:
        self.size = 0
        self.faults: dict[str, int] = {}
        self.updates: dict[str, int] = {}

    def add(self, shape: Shape, step: int) -> None:
        self.size += step
        if shape.fault:
            _step(self.faults, shape.fault, step)
        if shape.update:
            _step(self.updates, shape.update, step)

    def add_all(self, shapes: list[Shape]) -> None:
        """``add`` of each of ``shapes``."""
        self.size += len(shapes)
        faults, updates = self.faults, self.updates
        for shape in shapes:
            fault, update = shape.fault, shape.update
            if fault:
                faults[fault] = faults.get(fault, 0) + 1
            if update:
                updates[update] = updates.get(update, 0) + 1


def _step(counts: dict[str, int], key: str, step: int) -> None:
    left = counts.get(key, 0) + step
    if left:
        counts[key] = left
    else:
        del counts[key]


class Counts:
    """Every scope's size (module docstring), kept as VMs are put in and taken out."""

    def __init__(self, by_kind: Mapping[str, Budget]) -> None:
        self.by_kind = by_kind
        self.shapes: dict[tuple[Any, ...], Shape] = {}
        self.shape_of: dict[str, Shape] = {}  # every VM of the fleet -> its shape
        self.groups: dict[str, str | Members] = {}  # group -> its one VM, or its counts
        self.size: Counter[str] = Counter()  # the scopes not named after a group
        self.kind_of: dict[str, str] = {}
        self.budget_of: dict[str, Budget] = {}
        self.out: Counter[str] = Counter()  # scopes claimed beyond a VM's accepted placements
        self.slashed = 0  # VMs of the fleet with a "/" in a domain (``_named``)
        self.memo: dict[str, Look] = {}  # ``look``'s, until the counts change

    def shape(self, vm: Vm) -> Shape:
        """``vm``'s shape, one object for every VM placed alike."""
        scopes, kinds = scope_keys(vm, "")
        parts = tuple(_MARK.get(kind, scope) for scope, kind in zip(scopes, kinds, strict=True))
        fault, update = vm.fault_domain.lower(), vm.update_domain.lower()
        key = (parts, kinds, fault, update)
        found = self.shapes.get(key)
        if found is None:
            found = self.shapes[key] = Shape(parts, kinds, self.by_kind, fault, update)
        return found

    def put(self, key: str, group: str, shape: Shape) -> bool:
        """``key`` is in ``group`` with this shape; True when the group is new."""
        self.shape_of[key] = shape
        self.slashed += shape.slashed
        sizes, kind_of, budget_of, by_kind = self.size, self.kind_of, self.budget_of, self.by_kind
        for scope, kind in zip(shape.fixed, shape.kinds, strict=True):
            count = sizes.get(scope)
            if count is None:
                sizes[scope], kind_of[scope] = 1, kind
            else:
                sizes[scope] = count + 1
            if kind in by_kind:
                budget_of[scope] = by_kind[kind]
        return self.join(key, group, shape)

    def take(self, key: str, group: str) -> bool:
        """``key`` is no longer in the fleet; True when its group is left empty."""
        shape = self.shape_of.pop(key)
        self.slashed -= shape.slashed
        sizes = self.size
        for scope in shape.fixed:
            left = sizes[scope] - 1
            if left:
                sizes[scope] = left
            else:
                del sizes[scope], self.kind_of[scope]
                self.budget_of.pop(scope, None)
        return self.leave(key, group, shape)

    def join(self, key: str, group: str, shape: Shape) -> bool:
        """``key`` counts in ``group``'s scopes; True when the group is new."""
        if self.memo:
            self.memo.clear()
        groups = self.groups
        have = groups.get(group)
        if have is None:
            groups[group] = key
            return True
        if isinstance(have, str):
            members = groups[group] = Members()
            members.add(self.shape_of[have], 1)
            have = members
        have.add(shape, 1)
        return False

    def leave(self, key: str, group: str, shape: Shape) -> bool:
        """``key`` no longer counts in ``group``'s scopes; True when the group is left empty."""
        if self.memo:
            self.memo.clear()
        have = self.groups[group]
        if isinstance(have, str):
            del self.groups[group]
            return True
        have.add(shape, -1)
        if not have.size:
            del self.groups[group]
            return True
        return False

    def move(self, key: str, old: str, new: str) -> bool:
        """``key`` counts in ``new``'s scopes rather than ``old``'s; True when ``old`` is left empty."""
        shape = self.shape_of[key]
        have = self.groups.get(new)
        if isinstance(have, Members):
            have.add(shape, 1)
        else:
            self.join(key, new, shape)
        return self.leave(key, old, shape)

    def regroup(self, moves: Iterable[tuple[str, str, str]]) -> list[str]:
        """Each (VM, old group, new group) of ``moves`` counts in its new group's scopes rather than
        its old's, at once: every VM taken out of its old group, then each new group's VMs put in
        together (a burst names anew thousands of groups of one); the old groups left empty."""
        if self.memo:
            self.memo.clear()
        groups, shape_of, leave = self.groups, self.shape_of, self.leave
        emptied: list[str] = []
        incoming: dict[str, list[str]] = {}
        for key, old, new in moves:
            if leave(key, old, shape_of[key]):
                emptied.append(old)
            joining = incoming.get(new)
            if joining is None:
                incoming[new] = [key]
            else:
                joining.append(key)
        for new, keys in incoming.items():
            have = groups.get(new)
            if have is None:
                if len(keys) == 1:
                    groups[new] = keys[0]
                    continue
                have = groups[new] = Members()
            elif isinstance(have, str):
                members = groups[new] = Members()
                members.add(shape_of[have], 1)
                have = members
            have.add_all([shape_of[key] for key in keys])
        return emptied

    def claim_out(self, scopes: tuple[str, ...], step: int) -> None:
        """Scopes a VM claims beyond its accepted placements: not in their inventory."""
        if self.memo:
            self.memo.clear()
        out = self.out
        for scope in scopes:
            left = out[scope] + step
            if left:
                out[scope] = left
            else:
                del out[scope]

    # -- looking up ----------------------------------------------------------------------------

    def look(self, scope: str) -> Look:
        """``scope``'s size, inventory, kind and budget (0, 0, None, None: no such scope), kept
        until the counts change."""
        found = self.memo.get(scope)
        if found is None:
            kind: str | None
            size = self.size.get(scope)
            if size is not None:
                kind, budget = self.kind_of[scope], self.budget_of.get(scope)
            else:
                head, colon, rest = scope.partition(":")
                part = _PARTS.get(head) if colon else None
                size = 0 if part is None else self._named(part, rest)
                kind = _KIND[part] if size and part is not None else None
                budget = None if kind is None else self.by_kind.get(kind)
            found = (size, size - self.out.get(scope, 0), kind, budget)
            if len(self.memo) >= MEMO:  # a look at every scope (status) keeps no copy of them all
                self.memo.clear()
            self.memo[scope] = found
        return found

    def _named(self, part: int, rest: str) -> int:
        """VMs in the scope named after a group whose key ends in ``rest``: ``<group>`` for GROUP,
        else ``<group>/<domain>``, for every group the text can name (only the last ``/`` can
        part them while no VM's domain holds one)."""
        groups = self.groups
        if part == GROUP:
            have = groups.get(rest)
            return 0 if have is None else 1 if isinstance(have, str) else have.size
        total = 0
        cut = rest.find("/") if self.slashed else rest.rfind("/")
        while cut >= 0:
            domain = rest[cut + 1:]
            have = groups.get(rest[:cut]) if domain else None
            if isinstance(have, str):
                shape = self.shape_of[have]
                total += (shape.fault if part == FAULT else shape.update) == domain
            elif have is not None:
                total += (have.faults if part == FAULT else have.updates).get(domain, 0)
            cut = rest.find("/", cut + 1)
        return total

    def scopes(self) -> Iterator[str]:
        """Every scope of the fleet, each once."""
        yield from self.size
        seen: set[str] = set()
        for group, have in self.groups.items():
            yield "group:" + group
            if isinstance(have, str):
                shape = self.shape_of[have]
                faults: Any = (shape.fault,) if shape.fault else ()
                updates: Any = (shape.update,) if shape.update else ()
            else:
                faults, updates = have.faults, have.updates
            for scope in [*(f"fault_domain:{group}/{d}" for d in faults),
                          *(f"update_domain:{group}/{d}" for d in updates)]:
                if scope not in seen:
                    seen.add(scope)
                    yield scope


class Views:
    """scope_index.py's read-only mappings over ``Counts``: scope -> size, inventory (0 for a scope
    not in the fleet, as a Counter), kind, budget."""

    def __init__(self, counts: Counts) -> None:
        self.size = _View(counts, 0)
        self.inventory = _View(counts, 1)
        self.kind_of = _View(counts, 2)
        self.budget_of = _View(counts, 3)


class _View(Mapping[str, Any]):
    """The fleet's scopes whose ``Counts.look`` has a true ``field``, each to it (a count is 0 for
    another key, else KeyError)."""

    def __init__(self, counts: Counts, field: int) -> None:
        self.look, self.scopes, self.field = counts.look, counts.scopes, field

    def __getitem__(self, scope: str) -> Any:
        value = self.look(scope)[self.field]
        if value is None:
            raise KeyError(scope)
        return value

    def __contains__(self, scope: object) -> bool:
        return isinstance(scope, str) and bool(self.look(scope)[self.field])

    def __iter__(self) -> Iterator[str]:
        return (s for s in self.scopes() if s in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class ScopesOf(Mapping[str, tuple[str, ...]]):
    """VM of the fleet -> its scopes' keys (``budgeted``: those with a budget), made when asked."""

    def __init__(self, group_of: dict[str, str], shape_of: dict[str, Shape], budgeted: bool) -> None:
        self.group_of, self.shape_of, self.budgeted = group_of, shape_of, budgeted

    def __getitem__(self, key: str) -> tuple[str, ...]:
        return self.shape_of[key].scopes(self.group_of[key], self.budgeted)

    def get(self, key: str, default: Any = None) -> Any:
        shape = self.shape_of.get(key)
        return default if shape is None else shape.scopes(self.group_of[key], self.budgeted)

    def __contains__(self, key: object) -> bool:
        return key in self.group_of

    def __iter__(self) -> Iterator[str]:
        return iter(self.group_of)

    def __len__(self) -> int:
        return len(self.group_of)
