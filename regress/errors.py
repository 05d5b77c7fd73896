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
