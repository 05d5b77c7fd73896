"""The results service: a Flask WSGI app that runners upload bundles to (DESIGN §8).

    regress serve --host 0.0.0.0 --port 8080            # waitress, with read deadlines (server/wsgi.py)
    regress serve --dev-server                         # werkzeug, for debugging only

One blueprint per resource (health, runs, series), each with its OpenAPI fragment beside its views;
`GET /api/v1/openapi.json` joins them. Writes go through regress.store.repo in one transaction.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    # Flask is imported only when the app is made, so CLI commands that merely manage tokens (and
    # runner images without Flask) load without it.
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)
