"""The fleet page: static HTML, CSS and JavaScript served by the coordinator (app.py), fed by one
compact JSON document (model.py), configured by ``[web]`` (settings.py)."""

from __future__ import annotations

from .app import page_routes

__all__ = ["page_routes"]
