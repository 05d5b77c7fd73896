"""`python -m regress` is the `regress` command."""

from regress.cli import run

run()
