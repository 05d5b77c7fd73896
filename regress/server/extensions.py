"""The store, attached to the app Flask-extension style (`init_app`)."""

from __future__ import annotations

from flask import Flask, current_app

from regress.store.repo import Store, open_store


class StoreExtension:
    def init_app(self, app: Flask) -> None:
        store = open_store(app.config["DATABASE_URL"], upgrade=bool(app.config["AUTO_UPGRADE"]))
        # Drop the migration's pooled connections: under `gunicorn --preload` the workers fork after
        # this, and a connection shared across processes corrupts its protocol stream.
        store.engine.dispose()
        app.extensions["regress.store"] = store

    @property
    def store(self) -> Store:
        store: Store = current_app.extensions["regress.store"]
        return store


store_ext = StoreExtension()
