"""The results service: a Flask WSGI app that runners upload bundles to (DESIGN §8).

    regress serve --host 127.0.0.1 --port 8080          # development / small teams
    gunicorn --preload -w 4 'regress.server:create_app()'  # production

One blueprint per resource (health, runs, series), each with its OpenAPI fragment beside its views;
`GET /api/v1/openapi.json` joins them. Writes go through regress.store.repo in one transaction.
"""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
