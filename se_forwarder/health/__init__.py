"""The agent checks its own VM's application: ``[health]``'s probes and their verdict.

``settings.py`` parses the section (pure), ``probes.py`` runs one HTTP, TCP or command probe,
``verdict.py`` folds results into a verdict (pure: passes and failures in a row flip it), and
``checker.py`` is the thread that runs the probes in rounds, off the poll path. The verdict
travels in every heartbeat, and ``approvals/recovery.py`` waits for it before it reports an event
that affected this VM as ``recovered``.
"""
