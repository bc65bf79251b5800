"""What ``coordinator run`` starts next to the service when ``coordinator.toml`` asks for it: the
chat notifications (``[[notify]]`` teams and slack, output/chat.py), the alerts to pagers
(``[[notify]]`` pagerduty and opsgenie, output/alerting.py) and the fleet page's own listener
(``[web]``, config/web.py; the page is on the control API's listener in any case).

``coordinator run`` calls ``start_addons(service, settings)`` once the API listens, and ``stop()``
after the service stopped.
"""

from __future__ import annotations

import logging
from typing import Any

from ...errors import ConfigError

log = logging.getLogger("se_forwarder.coordinator")


class Addons:
    def __init__(self, notifier: Any = None, web: Any = None, alerting: Any = None) -> None:
        self.notifier, self.web, self.alerting = notifier, web, alerting

    def stop(self) -> None:
        if self.web is not None:
            self.web.stop()
        if self.notifier is not None:
            self.notifier.stop()
        if self.alerting is not None:
            self.alerting.stop()


def start_addons(service: Any, settings: Any) -> Addons:
    """Start what is configured; ConfigError (one line) when a hook URL, a pager's key or the web port
    is unusable."""
    from .api.server import ApiServer
    from .api.tokens import read_tokens
    from .output.alerting import Alerting
    from .output.chat import Notifier

    chat = [s for s in settings.notify if not s.pager]
    notifier = Notifier.from_settings(chat, service) if chat else None
    alerting = Alerting.from_settings(settings, service) if len(chat) < len(settings.notify) else None
    web = None
    if settings.web is not None:
        token_file = settings.web.token_file or settings.api.token_file
        tokens = read_tokens(token_file, "web.token_file" if settings.web.token_file else "api.token_file")
        try:
            web = ApiServer(service, settings.web.host, settings.web.port, tokens)
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("api.listen", "web", 1)) from None
        web.start()
        log.info("fleet page on http://%s:%d/", settings.web.host, web.port)
    if notifier is not None:
        notifier.start()
    if alerting is not None:
        alerting.start()
    return Addons(notifier, web, alerting)
