"""Tests of the webhook sink against real receivers on loopback."""
