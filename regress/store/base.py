"""Shared ORM base: naming convention, `get_or_create` for every entity, column shorthands,
time-sortable ids."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any, ClassVar, Self

from sqlalchemy import JSON, MetaData, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Session, mapped_column
from sqlalchemy.types import TypeDecorator

# Stable constraint names, so migrations can address them on every backend.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Unreadable(dict[str, Any]):
    """What a JSON column that holds no JSON reads as (SQLite keeps any text in it): an empty value
    that every reader can iterate, marked so that regress.store.readable names the row and skips
    it. Before, one such row gave a traceback in `runs list`, `export`, `site`, `gate` and a 500
    from the API (issue 41 item 7)."""

    def __init__(self, text: object) -> None:
        super().__init__()
        self.text = repr(text)[:60]


class StoredJSON(TypeDecorator[Any]):
    """JSON in and out; a stored text that is not JSON reads as Unreadable instead of raising."""

    impl = JSON
    cache_ok = True

    def result_processor(self, dialect: Any, coltype: Any) -> Any:
        inner = self.impl_instance.result_processor(dialect, coltype)
        if inner is None:  # the driver decodes (PostgreSQL): it never holds invalid JSON
            return None

        def process(value: Any) -> Any:
            try:
                return inner(value)
            except ValueError:  # json.JSONDecodeError, and UnicodeDecodeError of bad bytes
                return Unreadable(value)

        return process


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: StoredJSON,
        list[Any]: StoredJSON,
        list[float]: StoredJSON,
        list[str]: StoredJSON,
    }

    @classmethod
    def get_or_create(cls, session: Session, lookup: dict[str, Any], **values: Any) -> Self:
        """The row with these key columns, else a new one with `values` too, inserted in a savepoint:
        a concurrent insert of the same key wins and is re-read."""
        found = session.scalars(select(cls).filter_by(**lookup)).first()
        if found is not None:
            return found
        try:
            with session.begin_nested():
                row = cls(**lookup, **values)
                session.add(row)
                session.flush()
                return row
        except IntegrityError:
            return session.scalars(select(cls).filter_by(**lookup)).one()


def NotNull(*args: Any, **kwargs: Any) -> Any:
    return mapped_column(*args, nullable=False, **kwargs)


def Nullable(*args: Any, **kwargs: Any) -> Any:
    return mapped_column(*args, nullable=True, **kwargs)


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def new_run_id() -> str:
    """Time-sortable id: 12 hex digits of milliseconds, then 12 random hex digits."""
    return f"{int(time.time() * 1000):012x}{os.urandom(6).hex()}"
