"""The baseline: a loop written the way the documented sample is.

GET with `Metadata: true` once per interval with `requests.get`, parse the JSON, print the events
when the incarnation changes. Run as `python -m bench.sample_loop URL INTERVAL`.
"""

import json
import sys
import time

import requests

ENDPOINT = "/metadata/scheduledevents"
HEADERS = {"Metadata": "true"}


def main() -> None:
    base, interval = sys.argv[1], float(sys.argv[2])
    last = None
    while True:
        resp = requests.get(base + ENDPOINT, headers=HEADERS,
                            params={"api-version": "2020-07-01"}, timeout=5)
        doc = json.loads(resp.text)
        if doc["DocumentIncarnation"] != last:
            last = doc["DocumentIncarnation"]
            for event in doc["Events"]:
                print(event["EventId"], event["EventType"], event["EventStatus"], flush=True)
        time.sleep(interval)


if __name__ == "__main__":
    main()
