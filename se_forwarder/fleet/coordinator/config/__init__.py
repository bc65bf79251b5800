"""``coordinator.toml``, validated once, one ConfigError naming the key per problem.

``service`` reads the file and each section: ``hub`` (``[eventhub]``, ``[azure.feed]`` and how to
sign in), ``policy`` (budgets, blackouts), ``trust`` (``[trust]``, with the attestation
``anchors``), ``azure``, ``limits``, ``web`` and ``notify``. Nothing here imports the rest of the
coordinator.
"""
