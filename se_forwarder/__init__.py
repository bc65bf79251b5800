"""se-forwarder: Azure Scheduled Events to CloudEvents, durably delivered and approvable."""

__version__ = "0.1.0"
