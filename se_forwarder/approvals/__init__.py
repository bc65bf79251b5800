"""Approving events: local policy and hooks, remote signed approvals, and the approver loop."""
