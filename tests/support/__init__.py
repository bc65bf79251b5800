"""What the tests share, in one place: ports, waiting, the CLI, config files, the agent as a
subprocess, the HTTP receivers and endpoints, and the IMDS fault lists.

Fixtures stay in the ``conftest.py`` files and build on these modules; test modules import from
here (or from their own package's helper modules), never from another test module.
"""
