"""Remote approvals through an Azure Storage queue.

- ``names``: the pure rules for queue names and account URLs (used by the configuration and
  ``fleet approve``; no Azure package, no configuration);
- ``client``: ``[approvals.queue]`` resolved at agent start, the queue clients, ``check``;
- ``consumer``: the thread that validates and acts on approval messages.

Only ``names`` is imported here: importing the package pulls in neither Azure nor the approver.
"""

from .names import POISON_SUFFIX, poison_name, queue_name, validate_account_url, validate_template

__all__ = ["POISON_SUFFIX", "poison_name", "queue_name", "validate_account_url", "validate_template"]
