"""benchmarks/h200/h200_v2.py's table, without a GPU, from the committed results of issue 40's device
calls: every perf family is a row with its speedups, the group geomeans are regress.facts.stats' over those
rows, the A/B column reads the paired blocks (an A/A control sits at 1), and the plans recorded are
the v2 kernels'."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "h200"))
import h200_v2  # noqa: E402
from committed import extract  # noqa: E402

from regress.facts.stats import geomean  # noqa: E402

CALL3 = "h200-issue40-cuda.tar.xz:call3/v2-results.json.gz"


def test_the_table_of_the_committed_call(tmp_path: Path) -> None:
    results = h200_v2.load_results(extract(CALL3, tmp_path))
    perf = [r for r in results if r.case.suite == "perf"]
    assert len(perf) == 36 and all(r.status == "pass" for r in results)
    lines = h200_v2.table(results)
    rows = [ln for ln in lines if ln.startswith("| b")]
    assert len(rows) == 36 and all("sm90_v2" in ln for ln in rows)
    # the group line is the geomean of that group's rows
    causal_rtne = [
        r.metrics["speedup_vs_sdpa_cudnn"]
        for r in perf
        if r.case.params["mode"] == "rtne" and h200_v2.group_of(r) == "causal"
    ]
    want = f"| causal | rtne | sdpa_cudnn | {geomean(causal_rtne):.3f} | {min(causal_rtne):.3f} | 6 |"
    assert want in lines
    # A/B: every perf case has its arm; multi-head causal cannot pack, so both builds run one kernel
    ab = {r.case.name: h200_v2.ab_speed(r) for r in perf}
    assert all(math.isfinite(x) for x in ab.values())
    assert abs(ab["b2_h32_sq8192_sk8192_bshd_rtne_causal-tl"] - 1.0) < 0.02
    assert ab["b16_h32_sq2048_sk2048_bshd_rtne_hkv8_causal-tl"] > 1.1  # packing causal GQA costs
    assert "(measured 694-726)" in lines[-1]


def test_a_missing_ab_build_or_the_old_variable_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The A/B build is an argument: a path that is not a file, or the environment variable the suites
    stopped reading (which once dropped a device call's A/B arm without a word), ends the run before
    any case with the reason."""
    missing = tmp_path / "nope.so"
    monkeypatch.setattr(sys, "argv", ["h200_v2.py", "--out", str(tmp_path), "--ab-lib", str(missing)])
    with pytest.raises(SystemExit) as e:
        h200_v2.main()
    assert e.value.code == 2 and f"--ab-lib {missing}: no such library" in capsys.readouterr().err
    monkeypatch.setenv("REGRESS_AB_BASELINE_LIB", str(missing))
    monkeypatch.setattr(sys, "argv", ["h200_v2.py", "--out", str(tmp_path)])
    with pytest.raises(SystemExit) as e:
        h200_v2.main()
    assert e.value.code == 2 and "pass the A/B build as --ab-lib" in capsys.readouterr().err
