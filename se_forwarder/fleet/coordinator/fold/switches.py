"""The sequence rule of the switches: pause/resume of a scope and hold/release of an event.

Each switch decision carries ``Sequence``, numbered per scope (or per event) by the leader from
its fold (control.py): the first is 1, each next is exactly one more than the current one. The
fold takes a switch decision only when it follows that rule:

- ``Sequence`` is an integer (not a boolean) from 1 to ``MAX_SEQUENCE`` (2^53, the largest
  integer every JSON reader keeps exactly);
- it is exactly one more than the sequence of the key's current switch (0 when it has none);
- or it is the current switch again under the same id (a decision read back from the hub, or the
  twin an instance taking over made from the same fold: the fold keeps one of them).

So a decision can never skip ahead: a sequence out of reach (the review's ``10^700``) would
otherwise give the next real pause an id nobody can fold, and leave the scope stuck. All of one
coordinator's decisions go to one hub partition (output/hub_producer.py), so every instance reads
a scope's switches in the order they were made.

A snapshot (snapshot.py) keeps only each key's current switch (retention.py drops the ones before
it), so restoring one is ``chained=False``: the switch with the greatest (sequence, time, id) of
each key wins, whatever the order it is read in.
"""

from __future__ import annotations

from typing import Any

from .state import Switch

MAX_SEQUENCE = 2**53


def valid(value: Any) -> bool:
    """``value`` is a sequence number at all: an integer from 1 to ``MAX_SEQUENCE``."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SEQUENCE


def current(table: dict[str, Switch], key: str) -> int:
    """The sequence of ``key``'s current switch; 0 when it has none."""
    switch = table.get(key)
    return switch.record.sequence if switch is not None else 0


def put(table: dict[str, Switch], key: str, switch: Switch, *, chained: bool = True) -> bool:
    """Make ``switch`` the current one of ``key`` if the rule allows it; False when it does not."""
    sequence = switch.record.data.get("Sequence")
    if not valid(sequence):
        return False
    old = table.get(key)
    if chained:
        if old is not None and old.record.id == switch.record.id:
            table[key] = switch
            return True
        if sequence != current(table, key) + 1:
            return False
        table[key] = switch
        return True
    if old is None or old.record.id == switch.record.id or switch.order() > old.order():
        table[key] = switch
    return True
