"""User-facing errors: one clear line and an exit code, printed in one place (regress.cli)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

# Exit codes shared by every command: 0 ok, 1 a check failed (suite, gate), 2 could not run/decide,
# and 128 + N when signal N stopped it (the shell's convention: 130 SIGINT, 129 SIGHUP, 143 SIGTERM),
# so a CI job reads a cancelled step as cancelled, not as a failed check.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNDECIDED = 2
# The signals a CI cancel, a closed terminal and Ctrl-C send: every command ends cleanly on them.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def exit_code_for_signal(signum: int) -> int:
    return 128 + signum


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


class Interrupted(BaseException):  # not Exception: per-case error handling must not swallow it
    """A stop signal ended the command: regress.cli prints one line and exits 128 + its number."""

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(message or f"stopped by {signal_name(signum)}")
        self.signum = signum
        self.exit_code = exit_code_for_signal(signum)


Handler = Callable[[int, FrameType | None], None]
# What signal.signal returns and takes back: a handler, SIG_DFL/SIG_IGN, or None (set outside Python)
_SignalHandler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


@contextmanager
def on_stop_signals(handler: Handler) -> Iterator[None]:
    """`handler` for every stop signal while the block runs (the previous handlers after it).
    Outside the main thread signals cannot be caught, and the block runs without it."""
    previous: dict[signal.Signals, _SignalHandler] = {}
    try:
        for signum in STOP_SIGNALS:
            previous[signum] = signal.signal(signum, handler)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for stopped, old in previous.items():
            signal.signal(stopped, old)


def raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    """Every command's default: the signal unwinds like an error, so transactions roll back, temporary
    files are removed and `finally` blocks run; regress.cli turns it into one line."""
    raise Interrupted(signum)


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
