"""benchmarks/h200/h200_ab_control.py without a GPU: the dry run times the CPU library against a
byte-identical copy of itself (an A/A pair in both orders) and keeps every raw sample; bad --lib,
--pair, --shape, --modes and --rounds are refused with a one-line error naming the argument."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

from regress.native.build import build_kernel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "h200"))
import h200_ab_control as control  # noqa: E402


def test_an_a_a_pair_on_the_cpu_backend(tmp_path: Path) -> None:
    lib = build_kernel("cpu").path
    copy = tmp_path / "copy.so"
    shutil.copy(lib, copy)
    argv = ["--dry-run", "--lib", f"a={lib}", "--lib", f"b={copy}", "--pair", "a:b", "--pair", "b:a"]
    rc = control.main(
        [*argv, "--shape", "1:2:64:77", "--modes", "rtz", "--rounds", "4", "--out", str(tmp_path)]
    )
    assert rc == 0
    got = json.loads((tmp_path / "ab_control.json").read_text())
    assert got["device"] == "cpu" and [r["pair"] for r in got["rows"]] == ["a:b", "b:a"]
    for r in got["rows"]:
        assert r["shape"] == [1, 2, 64, 77] and r["mode"] == "rtz"
        assert all(len(s) == 4 and min(s) > 0 for s in r["samples_ms"].values())
        assert math.isfinite(r["second_over_first"]) and r["second_over_first"] > 0


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (["--lib", "a", "--pair", "a:b"], "is not NAME=PATH"),
        (["--lib", "a=x.so", "--pair", "a:a"], "is not FIRST:SECOND"),
        (["--lib", "a=x.so", "--pair", "a:c"], "which no --lib defines"),
        (["--lib", "a=x.so", "--lib", "b=y.so", "--pair", "a:b", "--modes", "up"], "each one of rtne"),
        (["--lib", "a=x.so", "--lib", "b=y.so", "--pair", "a:b", "--rounds", "1"], "--rounds must be >= 2"),
        (["--lib", "a=x.so", "--lib", "a=y.so", "--pair", "a:b"], "--lib names must differ"),
    ],
)
def test_bad_arguments_are_refused(extra: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    shape = [] if "--shape" in extra else ["--shape", "1:2:64:77"]
    with pytest.raises(SystemExit) as e:
        control.main(["--dry-run", "--out", "/nonexistent", *shape, *extra])
    assert e.value.code == 2 and error in capsys.readouterr().err


def test_a_bad_shape_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        control.main(["--lib", "a=x", "--lib", "b=y", "--pair", "a:b", "--shape", "1:2:0:77", "--out", "/x"])
    assert e.value.code == 2 and "is not B:H:SQ:SK" in capsys.readouterr().err
