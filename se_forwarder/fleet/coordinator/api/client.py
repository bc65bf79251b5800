"""The control commands' side of the API: requests to a running coordinator, and ``status`` as text.

The base URL and the token come from ``coordinator.toml`` (``[api] listen`` or ``advertise``, and
``token_file``), or from ``--url`` and ``--token-file``. The token is only ever read from a file (the
first entry of a token table, tokens.py), and the coordinator records each action under that
token's name in its own table.
"""

from __future__ import annotations

from typing import Any

import requests

from ....errors import ConfigError, SeForwarderError
from ....printable import strip_tree
from .tokens import read_tokens

TIMEOUT = 20.0


class Refused(SeForwarderError):
    """The coordinator answered with an error; the message is its one line."""


class Client:
    def __init__(self, base_url: str, token_file: str) -> None:
        self.base = base_url.rstrip("/")
        self.token = read_tokens(token_file).first
        self.http = requests.Session()
        self.http.trust_env = False  # the API is local or on the private network: no proxy

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self.http.request(method, f"{self.base}{path}", timeout=TIMEOUT,
                                         headers={"Authorization": f"Bearer {self.token}"}, **kwargs)
        except requests.RequestException as exc:
            raise SeForwarderError(f"cannot reach the coordinator at {self.base} ({type(exc).__name__}): "
                                   "is it running, and is this [api] listen?") from None
        try:
            body = response.json()
        except ValueError:
            body = {}
        if response.status_code == 401:
            raise ConfigError(f"the coordinator at {self.base} refused the token (api.token_file)")
        if response.status_code >= 400:
            text = body.get("error") if isinstance(body, dict) else None
            code = body.get("code") if isinstance(body, dict) else None
            prefix = f"refused ({code}): " if code else ""
            raise Refused(f"{prefix}{text or f'HTTP {response.status_code}'}")
        return body

    def status(self, all_scopes: bool = False, decisions: int = 20) -> dict[str, Any]:
        params = {"decisions": str(decisions), **({"all": "1"} if all_scopes else {})}
        result: dict[str, Any] = self._call("GET", "/v1/status", params=params)
        return result

    def act(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self._call("POST", f"/v1/{kind}", json=body)
        return result


LISTED = 20  # lines of one list (scopes, events, VMs) that status prints unless asked for every one


def _first(items: list[Any], every: bool) -> tuple[list[Any], list[str]]:
    """The items a list of ``status`` prints, and the line that says how many it left out."""
    if every or len(items) <= LISTED:
        return items, []
    return items[:LISTED], [f"  ... and {len(items) - LISTED} more (coordinator status --all lists them)"]


def _names(names: list[str], every: bool) -> str:
    shown = names if every or len(names) <= LISTED else names[:LISTED]
    return ", ".join(shown) + (f" and {len(names) - len(shown)} more" if len(shown) < len(names) else "")


def render_status(status: dict[str, Any], every: bool = False) -> str:
    """``coordinator status`` for people: who leads, scopes with budget use, what waits and why, and
    the VMs not watched; each list its first ``LISTED`` lines unless ``every``, so a fleet of
    100,000 VMs stays a screenful. Names and reasons come from VMs: their control characters are
    stripped."""
    s: dict[str, Any] = strip_tree(status)
    svc = s.get("service", {})
    leader = svc.get("leader") or {}
    lines = [f"coordinator {svc.get('name')}: this instance {svc.get('instance')} is {svc.get('role')}"
             + (f"; leader {leader.get('instance')} at {leader.get('api')}" if svc.get("role") == "standby"
                and leader else "")
             + ("; SHADOW MODE (nothing is sent)" if s.get("shadow") else "")
             + (f"; inside blackout {s['blackout']!r}" if s.get("blackout") else "")]
    if svc.get("notActing") and svc.get("role") != "standby":
        lines.append(f"not acting: {svc['notActing']}")
    if svc.get("stale") and svc.get("acting"):
        lines.append(f"NO EARLY APPROVAL (the fold is late): {svc['stale']}")
    lines += _reachability(svc.get("reachability") or {}, svc.get("pendingSends") or 0)
    fleet = s.get("fleet", {})
    lines.append(f"fleet: {fleet.get('vms', 0)} VMs, {fleet.get('watched', 0)} watched, "
                 f"{fleet.get('unavailable', 0)} unavailable, {fleet.get('groups', 0)} groups, "
                 f"{fleet.get('openEvents', 0)} open events")
    lines += _alerts(s)
    lines += _refusals(s, svc)
    lines += gate_lines(s)
    lines += _scopes(s, every)
    lines += _events(s, every)
    lines += _azure(s, every)
    lines += _fleet_notes(s, every)
    return "\n".join(lines)


def _alerts(s: dict[str, Any]) -> list[str]:
    """The open alerts, and the VMs counted down for their health or their recovery."""
    lines = [f"ALERT ({a['kind']}, {a['severity']}): {a['summary']}" for a in s.get("alerts") or []
             if a["kind"] != "gate-closed"]  # each gate has its line (gate_lines)
    unwell = s.get("health") or []
    if unwell:
        lines += ["", "HEALTH (each counts as unavailable in every budget it belongs to)"]
        lines += [f"  {h['name']}  {h['reason']}: {h['detail']}"
                  + (f" after {h['eventId']}" if h.get("eventId") else "") for h in unwell]
    return lines


def _refusals(s: dict[str, Any], svc: dict[str, Any]) -> list[str]:
    """What the edge refused (by reason), and what is paused or held."""
    lines: list[str] = []
    refused = svc.get("refused") or {}
    refused_azure = refused.get("azure", 0)
    if refused_azure:
        lines.append(f"REFUSED: {refused_azure} event(s) of Azure's own types on the agents' hub (only the "
                     "Azure feed hub carries Azure's events; a VM sent them)")
    forged = refused.get("forged", 0)
    if forged:
        lines.append(f"FORGED: {forged} decision(s) in this coordinator's name that did not verify were "
                     "dropped (someone who can send to the hub published them)")
    shard = svc.get("shard")
    if shard:
        owns = ", ".join(shard.get("subscriptions") or [])
        lines.append(f"shard {shard.get('name')}: owns subscription(s) {owns}; "
                     f"{refused.get('other-shard', 0)} event(s) of other shards' subscriptions skipped "
                     "unverified (their shard verifies them)")
    others = {code: n for code, n in refused.items()
              if n and code not in ("forged", "foreign", "other-shard")}
    if others:
        lines.append("REFUSED from the hub: " + ", ".join(f"{code} {n}" for code, n in sorted(others.items()))
                     + " (reports and registrations that did not verify: see docs/coordinator.md#trust)")
    for p in s.get("paused", []):
        lines.append(f"paused: {p['scope']} since {p['since']} by {p['actor']}: {p['reason']}")
    for h in s.get("held", []):
        lines.append(f"held: {h['eventId']} since {h['since']} by {h['actor']}: {h['reason']}")
    return lines


def gate_lines(s: dict[str, Any]) -> list[str]:
    """Each gate (open or CLOSED, and why) and each scope's maintenance window (view/gates.py)."""
    lines = [f"gate {g['name']} ({g['type']}, {g['scope']}): {'open' if g['open'] else 'CLOSED'}: "
             f"{g['reason']}" for g in s.get("gates", [])]
    for w in s.get("windows", []):
        window, blackout = w.get("window"), w.get("blackout")
        said = [f"windows of {w['scope']}: early approval {'open' if w['open'] else 'CLOSED'}"]
        if window:
            which = "window" if window["startUtc"] <= s.get("time", "") else "next window"
            said.append(f"{which} {window['name']!r} {window['text']}")
        elif any(not r["blackout"] for r in w.get("rules", [])):
            said.append("no window opens again")
        if blackout:
            said.append(f"blackout {blackout['name']!r} {blackout['text']}")
        lines.append("; ".join(said))
    return lines


def _scopes(s: dict[str, Any], every: bool) -> list[str]:
    """Each scope in use with its budget use (the fullest first), and the totals by kind."""
    lines: list[str] = []
    lines += ["", "SCOPES (budget use)"]
    scopes, more = _first(s.get("scopes", []), every)
    if scopes:
        width = max(len(x["scope"]) for x in scopes)
        lines.append(f"  {'SCOPE':<{width}}  USED/MAX  SIZE  PAUSED")
        for x in scopes:
            counted = x.get("inventory", x["size"])
            size = x["size"] if counted == x["size"] else f"{x['size']} ({counted})"
            lines.append(f"  {x['scope']:<{width}}  {x['used']:>4}/{x['max']:<3}  {size:>4}  "
                         f"{'yes' if x['paused'] else ''}")
        lines += more
    else:
        lines.append("  none in use")
    totals = s.get("scopeTotals", {})
    if totals:
        lines.append("  " + ", ".join(f"{kind}: {t['full']} of {t['scopes']} full" for kind, t in
                                      sorted(totals.items())))
    return lines


def _events(s: dict[str, Any], every: bool) -> list[str]:
    """The pending events with what each waits for, the started ones, shared queues."""
    lines: list[str] = []
    lines += ["", "PENDING EVENTS (earliest NotBefore first)"]
    pending, more = _first(s.get("pending", []), every)
    for p in pending:
        affected = _names(p.get("affected") or p.get("resources") or [], every) or "-"
        lines.append(f"  {p['eventId']}  {p.get('eventType') or '?':<8}  NotBefore "
                     f"{p.get('notBeforeUtc') or '-'}  {affected}")
        lines.append(f"      {p['reasonCode']}: {p['reason']}")
    lines += more
    if not pending:
        lines.append("  none")
    started, more = _first(s.get("started", []), every)
    if started:
        lines += ["", "STARTED"]
        lines += [f"  {x['eventId']}  {x.get('eventType') or '?'}  "
                  f"{'started by Azure (due) ' if x.get('due') else ''}since {x.get('startedUtc')}  "
                  f"{_names(x.get('affected') or [], every)}" for x in started]
        lines += more
    conflicts, more = _first(s.get("queueConflicts") or [], every)
    if conflicts:
        lines += ["", "APPROVAL QUEUES SHARED BY SEVERAL VMS (none of them is sent an approval)"]
        lines += [f"  {c['queue']}: {', '.join(c['vms'])}" for c in conflicts] + more
    return lines


def _fleet_notes(s: dict[str, Any], every: bool) -> list[str]:
    """VMs that claim one name, identity keys that changed or are shared, VMs not watched."""
    lines: list[str] = []
    named, more = _first(s.get("nameConflicts") or [], every)
    if named:
        lines += ["", "VMS THAT CLAIM ONE NAME (all count as unavailable, then all but the first claimant)"]
        lines += [f"  {c['name']}: {', '.join(c['vms'])}; first {c.get('first') or '-'}, held down: "
                  f"{', '.join(c.get('held') or []) or 'none'}" for c in named] + more
    outside, more = _first(s.get("outsideInventory") or [], every)
    if outside:
        lines += ["", "VMS OUTSIDE THEIR INVENTORY (not counted in these scopes' sizes; see them, then "
                  "`coordinator confirm`)"]
        lines += [f"  {o['name']} ({o['vmId']}): {', '.join(o['scopes'])}" for o in outside] + more
    keys = s.get("identities") or {}
    if keys.get("rekeyed") or keys.get("sharedKeys") or keys.get("conflicts"):
        lines += ["", "IDENTITY KEYS"]
        lines += [f"  {c['name'] or c['vmId']} ({c['vmId']}): one attested document came with keys "
                  f"{', '.join(c['keys'])} since {c['since']}; counted as unavailable until a newer "
                  "registration or 'coordinator settle-identity' settles it"
                  for c in keys.get("conflicts", [])]
        lines += [f"  {r['name'] or r['vmId']} ({r['vmId']}) registered a new key {r['new']} at {r['time']}, "
                  f"replacing {r['old']}" for r in keys.get("rekeyed", [])[:10]]
        shared, more = _first(keys.get("sharedKeys", []), every)
        lines += [f"  key {k['keyid']} is registered for several VMs (a copied state directory?): "
                  f"{', '.join(k['vms'])}" for k in shared] + more
    lines += ["", "VMS NOT WATCHED (no heartbeat within heartbeat_timeout)"]
    unwatched, more = _first(s.get("unwatched", []), every)
    for u in unwatched:
        age = u.get("heartbeatAgeSeconds")
        last = f"last heartbeat {age:.0f} s ago" if age is not None else "no heartbeat yet"
        lines.append(f"  {u['name']}  {u.get('group') or '-'}  {last}")
    lines += more
    if not unwatched:
        lines.append("  none")
    return lines

def _reachability(parts: dict[str, Any], pending: int) -> list[str]:
    """One line per part the service depends on: reachable or not, and its last success."""
    lines = []
    for name, r in parts.items():
        last = f"last success {r.get('lastSuccess') or 'never'}"
        if r.get("reachable", True):
            lines.append(f"  {name:<12} ok           {last}")
        else:
            state = str(r.get("state") or "unreachable").upper()
            lines.append(f"  {name:<12} {state:<12} since {r.get('failingSince')}, {last}: "
                         f"{r.get('lastError')}")
    if pending:
        lines.append(f"  {pending} approval message(s) waiting to be sent")
    return ["reachability:", *lines] if lines else []


def _azure(s: dict[str, Any], every: bool) -> list[str]:
    """The AZURE part of ``status``: freshness of Azure's view, agentless VMs, disagreements."""
    azure = s.get("azure")
    if not azure:
        return []
    ages = ", ".join(f"{sub} {age:.0f} s ago" for sub, age in (azure.get("syncedAgeSeconds") or {}).items())
    lines = ["", f"AZURE: {azure.get('vms', 0)} VMs, {azure.get('events', 0)} events; last complete "
             f"catch-up: {ages or 'none yet'}"]
    agentless, more = _first(azure.get("agentless") or [], every)
    lines.append(f"  agentless (Azure lists them, no agent reports): {', '.join(agentless) or 'none'}")
    lines += more
    findings = azure.get("findings") or []
    lines.append(f"  Azure and an agent disagree ({len(findings)}; Azure's is used):" if findings
                 else "  Azure and the agents agree")
    findings, more = _first(findings, every)
    for f in findings:
        where = f" for {f['eventId']}" if f.get("eventId") else ""
        lines.append(f"    {f['name']}: {f['field']}{where}: agent says {f['agent'] or '-'}, "
                     f"Azure says {f['azure'] or '-'}")
    return lines + more


def every_shard(own: str, peers: dict[str, str], token_file: str, all_scopes: bool = False,
                ) -> list[dict[str, Any]]:
    """``status`` of this shard (at ``own``) and of each of ``peers`` (``[shard] peers``), in that order:
    ``{"url", "status"}`` or ``{"url", "error"}`` each (one shard that does not answer hides no other).
    The same token file is used for each: give each person an entry in every shard's token table."""
    out: list[dict[str, Any]] = []
    for url in [own, *(peers[name] for name in sorted(peers))]:
        try:
            out.append({"url": url, "status": Client(url, token_file).status(all_scopes)})
        except SeForwarderError as exc:
            out.append({"url": url, "error": str(exc)})
    return out


def render_shards(results: list[dict[str, Any]], every: bool = False) -> str:
    """``coordinator status --shards`` for people: a line per shard, then each shard's status."""
    lines = [f"{len(results)} shard(s):"]
    for r in results:
        svc = (r.get("status") or {}).get("service") or {}
        fleet = (r.get("status") or {}).get("fleet") or {}
        shard = svc.get("shard") or {}
        said = (f"{svc.get('name')}: {svc.get('role')}{'' if svc.get('acting') else ', not acting'}, "
                f"{fleet.get('vms', 0)} VMs, {fleet.get('unavailable', 0)} unavailable, "
                f"{fleet.get('openEvents', 0)} open events, subscriptions "
                f"{', '.join(shard.get('subscriptions') or ['all'])}" if "status" in r
                else f"DOES NOT ANSWER: {r.get('error')}")
        lines.append(f"  {r['url']}  {strip_tree(said)}")
    for r in results:
        if "status" in r:
            lines += ["", render_status(r["status"], every)]
    return "\n".join(lines)
