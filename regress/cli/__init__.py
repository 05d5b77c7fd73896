"""The `regress` command line.

Each subcommand is a thin shell over a library function (tests call those directly). Commands live
in regress/cli/commands/<area>.py, each exporting COMMANDS; this module only collects them and turns
user errors into one line and an exit code.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import click

from regress import __version__
from regress.facts.errors import (
    EXIT_UNDECIDED,
    Interrupted,
    UserError,
    environment_fault,
    exit_code_for_signal,
    on_stop_signals,
    raise_interrupted,
)


class _Group(click.Group):
    """Lists each command with its whole first sentence, wrapped: click cut them at the terminal's
    width ("Store run bundles (e.g.", "Build the kernel library (cached by source, flags and...")."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [
            (name, command.get_short_help_str(limit=10_000))
            for name in self.list_commands(ctx)
            if (command := self.get_command(ctx, name)) is not None and not command.hidden
        ]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="regress")
def cli() -> None:
    """Nightly proof that a bf16 flash-attention kernel stays fast, exact and deterministic."""


def _register() -> None:
    from . import commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        for command in getattr(module, "COMMANDS", []):
            cli.add_command(command)
            _utf8_strings(command)


def _utf8_strings(command: click.Command) -> None:
    """Every plain string parameter of every command (run ids, names, notes, URLs) takes
    options.TEXT, so a non-UTF-8 one is one line and exit 2, whichever command it was given to."""
    from .commands.options import TEXT

    for param in command.params:
        if type(param.type) is click.types.StringParamType:
            param.type = TEXT
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _utf8_strings(sub)


_register()


def main(argv: list[str] | None = None) -> int:
    try:
        with on_stop_signals(raise_interrupted):  # SIGTERM/SIGHUP end a command like Ctrl-C does
            rv = cli.main(args=argv, prog_name="regress", standalone_mode=False)
    except Interrupted as stop:
        click.echo(f"regress: {stop}", err=True)
        return stop.exit_code
    except KeyboardInterrupt:  # SIGINT where a library put back Python's own handler
        click.echo("regress: stopped by SIGINT", err=True)
        return exit_code_for_signal(2)
    except UserError as err:
        click.echo(f"regress: error: {err}", err=True)
        return err.exit_code
    except click.exceptions.Exit as ex:
        return int(ex.exit_code or 0)
    except click.ClickException as err:
        err.show()
        return 2
    except click.Abort:
        click.echo("regress: aborted", err=True)
        return 2
    except Exception as err:  # a full disk, a corrupt database, a missing driver: no traceback
        fault = environment_fault(err)
        if fault is None:
            raise
        click.echo(f"regress: error: {fault}", err=True)
        return EXIT_UNDECIDED
    return rv if isinstance(rv, int) else 0


def run() -> None:
    sys.exit(main())
