"""Options several commands share, each declared once, so a flag has one name, help and default.

`--db` takes no click envvar: `store.db.database_url` is the one reader of $REGRESS_DATABASE_URL
(an absent `--db` arrives as None and falls back there), and importing the store here would load
SQLAlchemy for every `--help`.
"""

from __future__ import annotations

import math
from typing import Any

import click

from regress.facts import backends
from regress.facts.errors import UserError
from regress.facts.suite_facts import suites_for
from regress.native.build import DRILLS

db = click.option(
    "--db",
    "db_url",
    metavar="URL",
    help="Database URL (default: $REGRESS_DATABASE_URL, else ./.regress/regress.db).",
)

backend = click.option(
    "--backend",
    default="auto",
    show_default=True,
    type=click.Choice(backends.CHOICES),
    help="auto: hip on an AMD GPU, cuda on an NVIDIA GPU, else cpu. hip-emu: the gfx942 code object "
    f"on the CPU emulator ({' and '.join(suites_for('hip-emu'))} only).",
)

compile_only = click.option(
    "--compile-only", is_flag=True, help="HIP without ROCm: the gfx942 device code that clang-19 compiles."
)

inject = click.option(
    "--inject",
    multiple=True,
    metavar="FAULT",
    help="Fire drill: build a broken kernel ("
    + "; ".join(f"{d.name}{'=' + d.value if d.value else ''}: {d.breaks}" for d in DRILLS)
    + "); a nightly with one is a drill.",
)


class FiniteFloatRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf: every comparison with nan is false, so a plain
    range let `--max-mde nan` switch the power check off and `--case-timeout nan` the watchdog."""

    name = "float range"  # its metavar and messages stay those of the range it narrows

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        out = super().convert(value, param, ctx)
        if not math.isfinite(out):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return out


class Utf8Text(click.types.StringParamType):
    """A string parameter that must be UTF-8: run ids, names, notes and URLs are stored, written
    and printed as UTF-8. Python hands each non-UTF-8 byte of argv over as a lone surrogate, which
    ended in a UnicodeEncodeError traceback wherever the text was first encoded (a query's
    parameter, a file); here it is one line and exit 2, before the command runs. regress.cli gives
    every plain string parameter this type; paths keep click.Path, which takes any bytes."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = super().convert(value, param, ctx)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            try:
                shown = repr(text.encode("utf-8", "surrogateescape"))  # the bytes as given
            except UnicodeEncodeError:  # a surrogate that no byte decodes to (a caller's own str)
                shown = ascii(text)
            where = param.get_error_hint(ctx) if param is not None else "an argument"
            raise UserError(f"{where} is not UTF-8 text: {shown[:80]}") from None
        return text

    def __repr__(self) -> str:
        return "UTF8_TEXT"


TEXT = Utf8Text()
