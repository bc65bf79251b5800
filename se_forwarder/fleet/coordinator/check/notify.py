"""The check's ``notify`` part: each ``[[notify]]`` table's secret read, and each pager reached.

A chat hook's URL and a pager's key are read from their variable or file as at start (one line
naming the source when one is missing or malformed, never the value). A pager is then asked
something that pages nobody: PagerDuty's Events API an ``OPTIONS`` (it says whether the host
answers with TLS verified; only an event can check a routing key), Opsgenie the status of a request
that never was (``404`` with a valid key, ``401`` without one), as the agent's pager sinks check.
"""

from __future__ import annotations

from ....validation import public_url
from ..config.notify import NotifySettings, hook_url, pager_key
from .services import Result

TIMEOUT = 10.0
NIL_REQUEST = "/v2/alerts/requests/00000000-0000-0000-0000-000000000000"


def notify(settings: tuple[NotifySettings, ...]) -> Result:
    said = []
    for table in settings:
        if not table.pager:
            said.append(f"{table.format} hook {public_url(hook_url(table))}")
            continue
        problem = _reach(table, pager_key(table))
        if problem:
            return False, f"{table.format} {public_url(table.url)}: {problem}"
        said.append(f"{table.format} {public_url(table.url)} answers (alerts: {', '.join(table.alerts)})")
    return True, "; ".join(said)


def _reach(table: NotifySettings, key: str) -> str:
    """What is wrong with reaching the pager (module docstring), or ""."""
    import requests

    verify = table.ca_file or True
    try:
        if table.format == "pagerduty":
            requests.options(table.url, timeout=TIMEOUT, verify=verify)
            return ""
        reply = requests.get(table.url + NIL_REQUEST, timeout=TIMEOUT, verify=verify,
                             headers={"Authorization": f"GenieKey {key}"})
    except requests.RequestException as exc:
        return f"no answer ({type(exc).__name__})"
    if reply.status_code == 401:
        return ("Opsgenie refuses the API key (a key of an EU account works only with region = \"eu\"; "
                "the integration must be an API one with Create and Update access)")
    return ""
