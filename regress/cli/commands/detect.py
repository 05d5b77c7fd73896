"""`regress detect --csv FILE`: change points of any time-ordered series, as JSON."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from regress.detect.config import ChangePointConfig
from regress.facts.errors import UserError

_SPLIT = re.compile(r"[;\s]+")


def _number(text: str, where: str) -> float:
    try:
        return float(text) if text.strip() else math.nan
    except ValueError as exc:
        raise UserError(f"{where}: {text!r} is not a number") from exc


def read_series(
    text: str, column: str | None, samples_column: str | None, label_column: str | None = None
) -> tuple[str, list[float], list[list[float]] | None, list[dict[str, str]]]:
    """(value column, values, samples or None, rows) from CSV text with a header row.

    Without --column the column named "value" is used, else the first column whose cells are all
    numbers. An empty cell is a missing night (skipped, its row index kept).
    """
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise UserError("the CSV has no header row")
    names = [n for n in reader.fieldnames if n]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # DictReader keeps the last of equal names: which one was meant is unknowable
        raise UserError(f"the CSV header names {', '.join(map(repr, twice))} more than once")
    rows = list(reader)
    if column is None:
        if "value" in names:
            column = "value"
        else:
            numeric = [
                n
                for n in names
                if n != samples_column and rows and all(_is_number(r.get(n) or "") for r in rows)
            ]
            if not numeric:
                raise UserError(f"no numeric column among {names}; name one with --column")
            column = numeric[0]
    if column not in names:
        raise UserError(f"no column {column!r}; the CSV has {names}")
    for named in (samples_column, label_column):
        if named is not None and named not in names:
            raise UserError(f"no column {named!r}; the CSV has {names}")
    values = [_number(r.get(column) or "", f"row {i + 2}, column {column}") for i, r in enumerate(rows)]
    samples = None
    if samples_column is not None:
        samples = [
            [
                _number(t, f"row {i + 2}, column {samples_column}")
                for t in _SPLIT.split((r.get(samples_column) or "").strip())
                if t
            ]
            for i, r in enumerate(rows)
        ]
    return column, values, samples, rows


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@click.command("detect")
@click.option(
    "--csv",
    "csv_path",
    required=True,
    type=click.Path(dir_okay=False, allow_dash=True),  # a path: any bytes, unlike the text options
    help="Time-ordered CSV with a header row ('-' for stdin).",
)
@click.option("--column", help="The value column (default: 'value', else the first numeric column).")
@click.option(
    "--samples-column",
    help='A column of raw samples per row, numbers separated by spaces or semicolons, e.g. "1.02;1.01;1.05".',
)
@click.option("--label-column", help="A column copied into each change point (a commit, a date).")
@click.option("--lower-is-worse", is_flag=True, help="Higher values are better (throughput, TFLOP/s).")
@click.option("--alpha", type=float, help=f"Significance (default {ChangePointConfig.alpha}).")
@click.option(
    "--min-change",
    type=float,
    help=f"Smallest relative step (default {ChangePointConfig.min_relative_change}).",
)
def detect_cmd(
    csv_path: str,
    column: str | None,
    samples_column: str | None,
    label_column: str | None,
    lower_is_worse: bool,
    alpha: float | None,
    min_change: float | None,
) -> None:
    """Print the change points of one series as JSON.

    Each change point has the row index (0-based, data rows), the direction (slower/faster; with
    --lower-is-worse a drop is "slower"), the relative magnitude, the p-value and the means before
    and after. A one-row outlier that returns is not a change point.
    """
    if alpha is not None and not 0.0 < alpha <= 1.0:  # `not` so that nan is refused too
        raise UserError(f"--alpha must be in (0, 1], not {alpha}")
    if min_change is not None and not 0.0 <= min_change < math.inf:
        raise UserError(f"--min-change must be a finite number >= 0, not {min_change}")
    if csv_path == "-":
        data = sys.stdin.buffer.read()
    else:
        path = Path(csv_path)
        if not path.is_file():
            raise UserError(f"no such file: {csv_path}")
        data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")  # -sig: a spreadsheet's byte-order mark is not in the header
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start]
        raise UserError(f"the CSV is not UTF-8 text (byte {exc.start} is {bad:#04x})") from exc
    name, values, samples, rows = read_series(text, column, samples_column, label_column)
    cfg = ChangePointConfig(higher_is_worse=not lower_is_worse)
    if alpha is not None:
        cfg = replace(cfg, alpha=alpha)
    if min_change is not None:
        cfg = replace(cfg, min_relative_change=min_change)
    from regress.detect.changepoint import detect_change_points

    found = detect_change_points(values, samples=samples, config=cfg)
    out: list[dict[str, Any]] = []
    for cp in found:
        item: dict[str, Any] = cp.to_dict()
        if label_column:
            item["label"] = rows[cp.index].get(label_column)
        out.append(item)
    click.echo(json.dumps({"column": name, "rows": len(values), "change_points": out}, indent=2))


COMMANDS = [detect_cmd]
