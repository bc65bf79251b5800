"""Reading the agent's operations surface: samples scraped from /metrics, and /healthz."""

from __future__ import annotations

import requests


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """Every sample on /metrics as {(name, frozenset(labels)): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def sample(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def healthz(port: int) -> tuple[int, str]:
    """(status, line) of /healthz; (0, why) while nothing listens yet."""
    try:
        r = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    except requests.ConnectionError as exc:
        return 0, f"not listening: {type(exc).__name__}"
    return r.status_code, r.text.strip()
