"""The results service: a Flask WSGI app that runners upload bundles to (DESIGN §8).

    regress serve --host 127.0.0.1 --port 8080          # development / small teams
    gunicorn --preload -w 4 'regress.server:create_app()'  # production

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
