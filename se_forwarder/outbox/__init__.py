"""The durable outbox (``store.py``) and the tables it owns (see ``store.py``'s docstring)."""

from .approval_messages import ApprovalMessages
from .hook_runs import HookRun, HookRuns
from .store import DB_NAME, SCHEMA_VERSION, NewEvent, Outbox, SinkStatus, db_path

__all__ = [
    "DB_NAME", "SCHEMA_VERSION", "ApprovalMessages", "HookRun", "HookRuns", "NewEvent", "Outbox",
    "SinkStatus", "db_path",
]
