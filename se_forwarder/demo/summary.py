"""The fleet demo's summary: what the rollout did to each group, from the simulator's own record.

Every number comes from the simulator (its history of each event and its StartRequests record,
through record.py), never from what the coordinator or the agents said about it; only the count of
decisions comes from the hub, and what the coordinator's edge verified and refused from the
coordinator itself. The wording follows the numbers: "one at a time" only when no two VMs
of the group were ever down at once.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..simulator.history import EventLife
from ..sinks.pretty import WIDTH
from .record import GroupStory, Span, group_story, most_down, started_during
from .rollout import Announced

INDENT = " " * 7


@dataclass(frozen=True)
class Verified:
    """The coordinator's edge (gate.py) at one moment."""

    registered: int  # VMs of the fleet whose identity key an attested document bound
    reports: int  # agents' reports folded, each verified with its VM's registered key
    refused: int  # hub events refused by trust.py, whatever the reason
    waiting: int  # reports held until their VM's registration


def _s(seconds: float) -> str:
    return f"{seconds:.0f} s"


def _group(name: str, verb: str, kind: str, story: GroupStory, most: int, announced_at: float) -> str:
    n = story.vms
    pace = "one at a time" if most <= 1 else f"up to {most} at once"
    text = f"{name:<6} The {n} VMs of the {kind} were {verb} {pace}"
    if story.first_start is not None and story.last_end is not None:
        text += f" in {_s(story.last_end - story.first_start)} of demo time"
    if story.started < n:
        text += f" ({n - story.started} not yet)"
    own = story.by_own_request
    text += (", each on a StartRequests from its own VM" if own == story.started else
             f", {own} of them on a StartRequests from their own VM")
    if story.at_not_before:
        text += f", {story.at_not_before} by Azure at NotBefore"
    if story.not_before is not None:
        text += (f", where Azure alone would have started all {n} at NotBefore, "
                 f"{_s(story.not_before - announced_at)} after they were announced")
    return text + "."


def _failure(broken: EventLife, group: Sequence[EventLife], announced_at: float) -> str:
    end = broken.ended if broken.ended is not None else broken.started
    assert broken.started is not None and end is not None
    own = [life for life in group if set(life.resources) <= set(broken.resources)]
    others = started_during([life for life in group if life not in own], broken.started, end)
    vm = ", ".join(broken.resources)
    text = f"{'':<6} A hardware failure took {vm} down for {_s(end - broken.started)} with no notice"
    if broken.started < announced_at:
        text += ", just before the rollout"
    if started_during(own, broken.started, end):
        text += f"; the coordinator redeployed {vm} meanwhile (it was down anyway)"
    return text + (", and no other VM of the group went down until it was back." if not others else
                   f", and {others} other VM(s) of the group went down meanwhile.")


def _slow(vm: str, back: float, group: Sequence[EventLife]) -> str:
    """The VM whose application came back late: the group waited for it (the simulator's record)."""
    own = next((life for life in group if vm in life.resources), None)
    if own is None or own.ended is None:
        return ""
    later = [life.started for life in group if life.started is not None and life.started > own.ended]
    text = (f"{'':<6} {vm}'s application came back {_s(back - own.ended)} after its Reboot ended; the "
            "coordinator held the group's only slot until its agent reported it recovered")
    if later:
        text += f": the next VM started {_s(min(later) - back)} after it was back"
    return text + "."


def summary(lives: Sequence[EventLife], spans: Sequence[Span], scopes_of: Mapping[str, Sequence[str]],
            announced: Announced, failure: str | None, decisions: Counter[str], defers: Counter[str],
            echoes: int, verified: Verified | None, elapsed: float, time_scale: float,
            slow: tuple[str, float | None] | None = None) -> str:
    """The summary's lines (module docstring); ``slow``: the VM whose application came back late,
    and when it did (application.py)."""
    by_id = {life.event_id: life for life in lives}
    web = [by_id[i] for i in announced.web.values() if i in by_id]
    api = [by_id[i] for i in announced.api.values() if i in by_id]
    freeze = by_id.get(announced.freeze)
    broken = by_id.get(failure) if failure else None
    announced_at = min((life.added for life in web + api), default=0.0)
    most = most_down(spans, scopes_of)
    lines = ["", *textwrap.wrap(f"summary, from the simulator's record (at {time_scale:g}x a second of demo "
                                f"time is {time_scale / 60:g} min of Azure's; the demo took {_s(elapsed)}):",
                                WIDTH)]
    paragraphs = [
        _group("web", "rebooted", "availability set", group_story(web), most.get("group web", 0),
               announced_at),
        _group("api", "redeployed", "scale set (zones 1 and 2)", group_story(api), most.get("group api", 0),
               announced_at),
    ]
    if broken is not None and broken.started is not None:
        paragraphs.append(_failure(broken, api, announced_at))
    if slow is not None and slow[1] is not None:
        paragraphs.append(_slow(slow[0], slow[1], web))
    if freeze is not None and freeze.started is not None:
        how = "at its NotBefore" if freeze.how == "not-before" else f"({freeze.how})"
        paragraphs.append(f"{'db':<6} Its Freeze was left to Azure: it started {how}, "
                          f"{_s(freeze.started - freeze.added)} after it was announced.")
    order = list(dict.fromkeys(scope for vm_scopes in scopes_of.values() for scope in vm_scopes))
    order.sort(key=lambda scope: scope.startswith("zone "))  # groups first, each kind in fleet order
    worst = max(most.values(), default=0)
    listed = ", ".join(f"{scope.removeprefix('group ')}: {most.get(scope, 0)}" for scope in order)
    paragraphs.append(("Never more than 1 VM down at once in a group or a zone" if worst <= 1 else
                       f"Up to {worst} VMs down at once in one group or zone")
                      + f" (the most at once: {listed}).")
    codes = ", ".join(f"{code} {n}" for code, n in defers.most_common())
    paragraphs.append(f"The coordinator published {decisions.get('approve', 0)} approvals, "
                      f"{decisions.get('defer', 0)} deferrals ({codes or 'none'}) and "
                      f"{decisions.get('breach', 0)} breach warnings, each signed with its key; "
                      f"{echoes} approvals reached their VM as a signed message, which the VM's agent "
                      "verified before it POSTed StartRequests.")
    if verified is not None:
        paragraphs.append(f"It folded {verified.reports} reports from the agents, each verified with the key "
                          f"its VM registered with an attested document ({verified.registered} of "
                          f"{len(scopes_of)} VMs registered), and refused {verified.refused}.")
    for text in paragraphs:
        lines += textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent="  " + INDENT)
    return "\n".join(lines)
