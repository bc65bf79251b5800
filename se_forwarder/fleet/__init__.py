"""The coordinator's side of the fleet: watch events across VMs (tail), send approvals (approve)."""
