"""The keeper freezes what is alive out of the garbage collector's passes (ha/keeper.py), after a
collection: a cycle already let go is freed, never frozen for good."""

from __future__ import annotations

import gc
import weakref

from se_forwarder.fleet.coordinator.ha import keeper


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_a_cycle_let_go_before_a_freeze_is_freed_and_what_is_alive_is_frozen() -> None:
    kept = Node()
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only a collection frees it
    gone = weakref.ref(a)
    del a, b
    was_enabled = gc.isenabled()
    gc.disable()  # no collection of its own in between: only the keeper's
    try:
        keeper.freeze()
        assert gone() is None
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects())  # frozen objects are out of every pass
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()
