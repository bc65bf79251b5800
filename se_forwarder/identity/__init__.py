"""The agent's identity for the fleet coordinator: its Ed25519 key (``key.py``), the nonce that
binds an IMDS attested document to that key (``attested.py``) and the registration that keeps an
``identity`` event fresh for the Event Hubs sinks (``registration.py``). See ``docs/identity.md``.
"""
