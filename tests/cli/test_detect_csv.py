"""`regress detect --csv` on hostile input: one line naming the problem and exit 2, never a traceback
nor an answer computed from a column or a setting other than the one asked for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from regress.cli import main

STEP = "value\n1\n1\n1\n1\n2\n2\n2\n2\n"


def _detect(tmp_path: Path, data: bytes, *args: str) -> int:
    csv = tmp_path / "series.csv"
    csv.write_bytes(data)
    return main(["detect", "--csv", str(csv), *args])


def _one_error(capsys: pytest.CaptureFixture[str], *words: str) -> None:
    err = capsys.readouterr().err
    assert err.startswith("regress: error: ") and err.count("\n") == 1, err
    assert all(w in err for w in words), err


def test_non_utf8_bytes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _detect(tmp_path, b"value\n1\n\xff\xfe\n") == 2  # was a UnicodeDecodeError traceback
    _one_error(capsys, "not UTF-8", "0xff")


def test_a_byte_order_mark_is_not_part_of_the_first_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A spreadsheet's "UTF-8 CSV": the mark made the header '\ufeffvalue', so --column value failed.
    assert _detect(tmp_path, b"\xef\xbb\xbf" + STEP.encode(), "--column", "value") == 0
    assert [c["index"] for c in json.loads(capsys.readouterr().out)["change_points"]] == [4]


def test_a_column_named_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Silently read the last 'value' column, answering for a series the engineer did not pick.
    assert _detect(tmp_path, b"value,value\n1,2\n1,2\n1,2\n2,3\n2,3\n2,3\n") == 2
    _one_error(capsys, "'value'", "more than once")


def test_a_missing_label_column_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Printed "label": null on every change point.
    assert _detect(tmp_path, STEP.encode(), "--label-column", "commit") == 2
    _one_error(capsys, "'commit'")


@pytest.mark.parametrize(
    "args", [("--alpha", "nan"), ("--alpha", "0"), ("--alpha", "-1"), ("--alpha", "2"),
             ("--min-change", "nan"), ("--min-change", "-0.5"), ("--min-change", "inf")]
)  # fmt: skip
def test_settings_out_of_range_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, str]
) -> None:
    # --alpha nan or -1 found nothing and said so as if the series were steady.
    assert _detect(tmp_path, STEP.encode(), *args) == 2
    _one_error(capsys, args[0])


def test_values_near_the_float_maximum_print_valid_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Printed a step one row early and "after_mean": Infinity, which is not JSON.
    assert _detect(tmp_path, b"value\n1\n1\n1\n1e308\n1e308\n1e308\n") == 0
    out = capsys.readouterr().out
    found = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the output"))["change_points"]
    assert [(c["index"], c["after_mean"]) for c in found] == [(3, 1e308)]
