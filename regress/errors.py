"""User-facing errors: one clear line and an exit code, printed in one place (regress.cli)."""

from __future__ import annotations

# Exit codes shared by every command: 0 ok, 1 a check failed (suite, gate), 2 could not run/decide.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNDECIDED = 2


class UserError(Exception):
    """Bad input or an environment that cannot do what was asked. Never a traceback."""

    def __init__(self, message: str, exit_code: int = EXIT_UNDECIDED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


POSTGRES_HINT = "PostgreSQL needs the psycopg driver: pip install 'regress[postgres]'"
_DISK_FULL = {28, 122}  # ENOSPC, EDQUOT
_CORRUPT = ("file is not a database", "database disk image is malformed", "malformed database schema")


def environment_fault(exc: BaseException) -> str | None:
    """One line, with the hint that fixes it, for an exception that is the environment's fault (a
    full disk, a corrupt SQLite file, a missing driver), else None. Walks the chain of causes;
    never imports a driver itself (the CLI calls it on every error)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        message = str(getattr(current, "orig", None) or current).strip().splitlines()
        first = message[0] if message else type(current).__name__
        if isinstance(current, OSError) and current.errno in _DISK_FULL:
            where = f" writing {current.filename}" if current.filename else ""
            return f"no space left on the device{where}: free some space (or point --out/--db elsewhere)"
        if "database or disk is full" in first:
            return f"the database's disk is full ({first}): free some space and run again"
        if any(mark in first for mark in _CORRUPT):
            return (
                f"the SQLite database is corrupt ({first}): restore it from a backup, or move the "
                "file aside to start a new one"
            )
        if isinstance(current, ModuleNotFoundError) and (current.name or "").startswith("psycopg"):
            return POSTGRES_HINT
        current = current.__cause__ or current.__context__
    return None
