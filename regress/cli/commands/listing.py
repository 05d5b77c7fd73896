"""The one output convention of every listing (issue 42).

- For people: a table sized to the terminal whose cells wrap and never cut. Piped, with no
  terminal to size to: $COLUMNS when set, else the table's own width, one row a line (grep finds
  a row whole). `runs show` cut case names at 80 columns, so the
  rtna, rtne and rtz cases read the same; `regressions list` printed 200 columns whatever the width.
- For machines: `--json` (every field) and `--tsv` (the table's columns, a header row, one row a
  line: `cut -f1` gives ids another command accepts). Piped output is the same table as on a
  terminal: only these flags change the format, so a script never depends on where stdout goes.
- Stored text is uploaded text: rich markup off, controls shown as escapes (escape.visible), so a
  tab or newline in a value cannot forge a row or a column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from regress.facts.escape import visible

if TYPE_CHECKING:
    from rich.console import Console

F = TypeVar("F", bound=Callable[..., Any])


def machine_formats(f: F) -> F:
    """--json and --tsv, the two machine formats every listing takes."""
    f = click.option(
        "--tsv",
        "as_tsv",
        is_flag=True,
        help="Tab-separated: a header row, then one row a line (tabs and newlines in values escaped).",
    )(f)
    return click.option("--json", "as_json", is_flag=True, help="Every field, as JSON.")(f)


def console(*, stderr: bool = False) -> Console:
    from rich.console import Console

    return Console(markup=False, highlight=False, stderr=stderr)


def _sized(out: Console, renderable: Any) -> int | None:
    """The width to print at: the console's own on a terminal or with $COLUMNS, else the
    renderable's natural width (rich's 80-column default folded a nine-column table cell by cell)."""
    import os

    if out.is_terminal or os.environ.get("COLUMNS"):
        return None
    return int(out.measure(renderable, options=out.options.update_width(10_000)).maximum)


def print_rows(
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    as_tsv: bool = False,
    right: Sequence[str] = (),
    no_wrap: Sequence[str] = (),
    title: str | None = None,
    out: Console | None = None,
) -> None:
    """The listing as a table for people, or as TSV with `as_tsv`. `no_wrap`: columns kept on one
    line (ids, which a reader copies); every other cell wraps, folding a word longer than its
    column onto the next line rather than cutting it."""
    if as_tsv:
        click.echo("\t".join(columns))
        for row in rows:
            click.echo("\t".join(visible(cell) for cell in row))
        return
    from rich import box
    from rich.table import Table
    from rich.text import Text

    # Rules under the header only: a boxed table spent 3 columns a cell on lines (runs list, nine
    # columns, folded every cell at 80 columns).
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 2, 0, 0), pad_edge=False)
    for col in columns:
        table.add_column(
            col, justify="right" if col in right else "left", overflow="fold", no_wrap=col in no_wrap
        )
    for row in rows:
        table.add_row(*(Text(visible(cell)) for cell in row))
    out = out or console()
    width = _sized(out, table)
    if width is not None:
        out.width = width  # print(width=) is capped by the console's own width
    out.print(table)
