"""The control API and its clients: Starlette on uvicorn in a thread of the service.

``server`` (routes, trusted hosts, bearer tokens from ``tokens``), ``page`` (the fleet page's
routes and its ``static/`` files) and ``client`` (the commands' side: requests to a running
coordinator, and ``status`` as text).
"""
