"""benchmarks/h200/h200_issue40_close.py without a GPU: the decode arms on the CPU backend (the dry run:
one build as both arms, so its bits are equal and within the contract), the decision rule for
RA_CUDA_GQA_ROWS (the default stays 1 only while >= 1.00x the v2 build on every decode row and the
contract met; a dry run gives no verdict), and bad --shapes / --modes refused with a one-line error."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "h200"))
import h200_issue40_close as close  # noqa: E402


def row(speed: float, ok: bool = True) -> dict[str, Any]:
    return {"shape": "(1, 32/8, 1, 8192)", "mode": "rtne", "ours_speed_vs_v2": speed, "contract_ok": ok}


def test_the_decision_rule() -> None:
    assert close.verdict([row(1.8), row(1.0)]).startswith("keep RA_CUDA_GQA_ROWS=1 the default")
    assert close.verdict([row(1.8), row(0.999)]).startswith("revert RA_CUDA_GQA_ROWS to 0")
    assert close.verdict([row(1.8), row(float("nan"))]).startswith("revert")  # an arm without blocks
    assert "contract: (1, 32/8, 1, 8192) rtne" in close.verdict([row(1.8, ok=False)])
    assert close.verdict([]) == "no decode rows: no verdict"


def test_the_dry_run_on_the_cpu_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["decode", "--dry-run", "--out", str(tmp_path), "--shapes", "2:8:4:130", "--modes", "rtz"]
    rc = close.main([*argv, "--iterations", "4"])
    assert rc == 0
    got = json.loads((tmp_path / "decode.json").read_text())
    assert got["device"] == "cpu" and len(got["rows"]) == 1
    r = got["rows"][0]
    assert r["shape"] == "(2, 8/4, 1, 130)" and r["bits_equal_fraction"] == 1.0 and r["contract_ok"]
    assert 0 < r["scaled_ulp_max"]["ours"] == r["scaled_ulp_max"]["v2"] <= 2.0
    # one two-arm run a comparison, every raw sample kept
    assert r["median_ms"].keys() == r["samples_ms"].keys() == {"ours vs v2", "ours vs baseline:sdpa_cpu"}
    assert set(r["samples_ms"]["ours vs baseline:sdpa_cpu"]) == {"ours", "baseline:sdpa_cpu"}
    assert all(len(s) == 4 for pair in r["samples_ms"].values() for s in pair.values())
    assert r["ours_speed_vs_v2"] > 0 and r["ours_vs_sdpa_cpu"] > 0
    close.main(["table", str(tmp_path)])
    table = capsys.readouterr().out
    assert "| (i) decode, contract | 1 of 1 rows ok |" in table
    assert "| verdict | none: a dry run off the H200 |" in table and "no gate.json" in table


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--shapes", "2:8:3:130"], "HKV=3 does not divide H=8"),
        (["--shapes", "2:8:0:130"], "is not B:H:HKV:SK"),
        (["--modes", "rtne,up"], "each one of rtne, rtna, rtz"),
        (["--iterations", "1"], "--iterations must be >= 2"),
    ],
)
def test_bad_arguments_are_refused(argv: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        close.main(["decode", "--dry-run", "--out", "/nonexistent", *argv])
    assert e.value.code == 2 and error in capsys.readouterr().err
