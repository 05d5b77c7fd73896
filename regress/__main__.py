"""`python -m regress` is the `regress` command."""

from .cli import run

run()
