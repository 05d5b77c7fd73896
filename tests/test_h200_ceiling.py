"""benchmarks/h200/h200_ceiling.py: `report` on a committed real nightly bundle, checked against
hand computations from the bundle's raw samples; its refusals; `measure` without a GPU."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from regress.facts.stats import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "h200"))
import h200_ceiling  # noqa: E402
from committed import extract  # noqa: E402

CALL = (
    "h200-issue26.tar.xz:call6/h200-full-01a23241d97138bfc089b083.json"  # the bundle of the call it measured
)
KINDS = ["--tflops", "788", "--tbps", "4.3"]  # KINDS.md's recorded burst figures


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(h200_ceiling.cli, list(args))


@pytest.fixture(scope="module")
def bundle_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract(CALL, tmp_path_factory.mktemp("committed"))


@pytest.fixture(scope="module")
def bundle(bundle_path: Path) -> dict[str, Any]:
    return json.loads(bundle_path.read_text())


@pytest.fixture(scope="module")
def doc(bundle_path: Path) -> dict[str, Any]:
    res = _invoke("report", str(bundle_path), *KINDS, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def _raw_p50s(bundle: dict[str, Any], name: str) -> tuple[float, float]:
    """(ours, cuDNN) p50 in ms from the stored per-call samples, not from the metrics."""
    r = next(r for r in bundle["results"] if r["name"] == name)
    return median(r["samples"]["time_ms"]), median(r["samples"]["baseline:sdpa_cudnn:time_ms"])


def _family_row(doc: dict[str, Any], fam: str, mode: str) -> dict[str, Any]:
    return next(r for r in doc["families"] if r["family"] == fam and r["mode"] == mode)


def test_a_bytes_bound_family_matches_the_hand_computation(
    doc: dict[str, Any], bundle: dict[str, Any]
) -> None:
    # (256,32,128,128): FLOPs 4*256*32*128*128*128 = 68,719,476,736 -> 87.2 us at 788 TFLOP/s;
    # bytes 2 * 128 * 256*32 * (128 + 128 + 128 + 128) = 1,073,741,824 -> 249.71 us at 4.3 TB/s.
    row = _family_row(doc, "256,32,128,128", "rtne")
    assert row["flops"] == 68_719_476_736 and row["min_bytes"] == 1_073_741_824
    assert row["bound"] == "bytes"
    floor_ms = 1_073_741_824 / 4.3e12 * 1e3
    assert row["floor_ms"] == pytest.approx(0.249707, rel=1e-5) == floor_ms
    # The family's row is the layout with the lower speedup (perf_table.py's rule), by hand.
    by_layout = {lay: _raw_p50s(bundle, f"b256_h32_sq128_sk128_{lay}_rtne") for lay in ("bhsd", "bshd")}
    lay = min(by_layout, key=lambda k: by_layout[k][1] / by_layout[k][0])
    ours, cudnn = by_layout[lay]
    assert row["layout"] == lay
    assert row["ours_ms"] == pytest.approx(ours, rel=1e-9)
    assert row["cudnn_ms"] == pytest.approx(cudnn, rel=1e-9)
    assert row["ceiling_ratio"] == pytest.approx(cudnn / floor_ms, rel=1e-9)
    assert row["ours_frac_of_floor"] == pytest.approx(floor_ms / ours, rel=1e-9)
    assert row["speedup"] == pytest.approx(cudnn / ours, rel=1e-9)


def test_a_flops_bound_family_matches_the_hand_computation(
    doc: dict[str, Any], bundle: dict[str, Any]
) -> None:
    # (2,16,8192,8192): FLOPs 4*2*16*8192^2*128 = 1,099,511,627,776 -> 1.39532 ms at 788 TFLOP/s;
    # bytes 2*128*2*16*(4*8192) = 268,435,456 -> 62.4 us: the FLOPs bind.
    row = _family_row(doc, "2,16,8192,8192", "rtz")
    assert row["bound"] == "flops"
    floor_ms = 1_099_511_627_776 / 788e12 * 1e3
    assert row["floor_ms"] == pytest.approx(1.395319, rel=1e-6) == floor_ms
    _, cudnn = _raw_p50s(bundle, f"b2_h16_sq8192_sk8192_{row['layout']}_rtz")
    assert row["ceiling_ratio"] == pytest.approx(cudnn / floor_ms, rel=1e-9)


def test_the_geomeans_are_over_the_nightlys_rows(doc: dict[str, Any], bundle: dict[str, Any]) -> None:
    recorded = bundle["run"]["summary"]["geomean_speedup"]
    perf = [r for r in bundle["results"] if r["suite"] == "perf" and r["status"] == "pass"]
    for mode in ("rtne", "rtna", "rtz"):
        g = doc["geomean"]["rows"][mode]
        rows = [r for r in perf if r["params"]["mode"] == mode]
        assert g["n"] == len(rows) == 60
        assert round(g["ours"], 4) == recorded[mode]["sdpa_cudnn"]
        # The ceiling geomean by hand: t_cuDNN (raw samples) over the floor, every row of the mode.
        logs = []
        for r in rows:
            p = r["params"]
            flops = 4 * p["b"] * p["h"] * p["sq"] * p["sk"] * 128
            nbytes = 2 * 128 * p["b"] * p["h"] * (2 * p["sq"] + 2 * p["sk"])
            floor_ms = max(flops / 788e12, nbytes / 4.3e12) * 1e3
            logs.append(math.log(median(r["samples"]["baseline:sdpa_cudnn:time_ms"]) / floor_ms))
        assert g["ceiling"] == pytest.approx(math.exp(sum(logs) / len(logs)), rel=1e-9)
        # Held at 80 %: rows at >= 80 % of the floor keep their ratio, the others reach the floor.
        mine = [r for r in doc["rows"] if r["mode"] == mode]
        kept = [r["speedup"] for r in mine if r["ours_frac_of_floor"] >= 0.8]
        raised = [max(r["speedup"], r["ceiling_ratio"]) for r in mine if r["ours_frac_of_floor"] < 0.8]
        want = math.exp(sum(math.log(x) for x in kept + raised) / len(mine))
        assert g["held"]["80"] == pytest.approx(want, rel=1e-12) and g["held_count"]["80"] == len(kept)
        assert doc["geomean"]["families"][mode]["n"] == 30


def test_the_markdown_report_and_a_ceilings_file_agree(
    tmp_path: Path, doc: dict[str, Any], bundle_path: Path
) -> None:
    res = _invoke("report", str(bundle_path), *KINDS)
    assert res.exit_code == 0, res.output
    assert "| 256,32,128,128 | 68.72 | 1074 | 249.7 | bytes |" in res.output
    assert "the bar of 1.08×" in res.output
    ceilings = tmp_path / "ceil.json"
    ceilings.write_text(json.dumps({"ceilings": {"tflops": 788, "tbps": 4.3}}))
    res = _invoke("report", str(bundle_path), "--ceilings", str(ceilings), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["geomean"] == doc["geomean"]


def _one_line_error(res: Any, *words: str) -> None:
    assert res.exit_code == 2, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("Error:"), res.output
    for w in words:
        assert w in last, res.output


def test_hostile_inputs_are_refused_in_one_line(
    tmp_path: Path, bundle: dict[str, Any], bundle_path: Path
) -> None:
    _one_line_error(_invoke("report", str(tmp_path / "none.json"), *KINDS), "does not exist")
    no_cudnn = tmp_path / "no-cudnn.json"
    stripped = json.loads(json.dumps(bundle))
    for r in stripped["results"]:
        r["metrics"] = {k: v for k, v in r["metrics"].items() if "sdpa_cudnn" not in k}
        r["samples"] = {k: v for k, v in (r.get("samples") or {}).items() if "sdpa_cudnn" not in k}
    no_cudnn.write_text(json.dumps(stripped))
    _one_line_error(_invoke("report", str(no_cudnn), *KINDS), "no sdpa_cudnn timings", "180 perf results")
    for flags in (
        ["--tflops", "0", "--tbps", "4.3"],
        ["--tflops", "788", "--tbps", "-1"],
        ["--tflops", "inf", "--tbps", "4.3"],
        ["--tflops", "788"],
    ):
        _one_line_error(_invoke("report", str(bundle_path), *flags))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    _one_line_error(_invoke("report", str(bad), *KINDS), "not readable JSON")
    _one_line_error(_invoke("report", str(bad), "--ceilings", str(bad)), "not readable JSON")
    zero = tmp_path / "zero.json"
    zero.write_text(json.dumps({"ceilings": {"tflops": 0, "tbps": 4.3}}))
    _one_line_error(_invoke("report", str(bundle_path), "--ceilings", str(zero)), "no positive ceilings")
    _one_line_error(_invoke("report", str(bundle_path), "--ceilings", str(zero), *KINDS), "not both")


def test_measure_without_cuda_says_so_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "ceil.json"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/h200/h200_ceiling.py"), "measure", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "needs a CUDA GPU" in done.stderr
    assert not out.exists() and not list(tmp_path.iterdir())
