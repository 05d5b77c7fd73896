"""benchmarks/h200/h200_byte_floor.py and family_spread.py on committed device results: the floor table
re-derived from its raw JSON, the trace's phase arithmetic on hand-built rows, the run-to-run
spread against the bundles' raw samples; byte_floor.cu builds where nvcc is."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from regress.facts.stats import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "h200"))
import family_spread  # noqa: E402
import h200_byte_floor as floor  # noqa: E402
from committed import read, read_json  # noqa: E402

FLOOR_CALL = "h200-issue26.tar.xz:call34"
SPREAD_BUNDLES = [
    "headline/h200-issue26-call32-01a2362836778f864ca70f37.json",
    "h200-issue26.tar.xz:call35/01a2369b09dedc177b3ec021.json",
    "h200-issue26.tar.xz:call35/01a2369d87be939f84e94c7d.json",
]


def test_the_committed_floor_table_is_its_json() -> None:
    doc = read_json(f"{FLOOR_CALL}/floor.json")
    assert floor.table(doc["rows"]) + "\n" == read(f"{FLOOR_CALL}/floor.txt").decode()
    for r in doc["rows"]:  # the floor of a row is its fastest configuration, in the same rounds
        configs = {k: v for k, v in r["ms"].items() if k.startswith("floor:")}
        assert len(configs) == len(doc["configs"]) and r["floor_ms"] == min(configs.values())


def _row(
    entry_ns: int, exit_ns: int, ghz: float, ready: float, first: float, last: float, sm: int
) -> list[int]:
    """A trace row (trace.cuh's order) with its SM-clock events at `ready`, `first`, `last` us."""
    c0 = 1_000_000
    row = [0] * floor.TRACE_EVENTS
    row[floor.ENTRY_NS], row[floor.EXIT_NS], row[floor.SM] = entry_ns, exit_ns, sm
    row[floor.ENTRY] = c0
    row[floor.READY] = c0 + round(ready * 1e3 * ghz)
    row[floor.FIRST_DATA] = c0 + round(first * 1e3 * ghz)
    row[floor.LAST_ISSUE] = c0 + round(last * 1e3 * ghz)
    row[floor.EXIT] = c0 + round((exit_ns - entry_ns) * ghz)
    return row


def test_trace_phases_by_hand() -> None:
    a = _row(10_000_000, 10_100_000, 1.5, 0.25, 2.75, 97.0, 3)  # 100 us, at 1.5 GHz
    b = _row(10_000_200, 10_106_200, 2.0, 0.35, 2.35, 103.0, 7)  # 106 us, at 2.0 GHz
    stale = _row(9_000_000, 9_090_000, 1.5, 0.25, 2.5, 80.0, 9)  # a row an older launch left
    raw = [v for r in (a, stale, [0] * floor.TRACE_EVENTS, b) for v in r]
    rows = floor.launch_rows(raw)
    assert rows == [a, b]
    ph = floor.phases(rows, 0.1095)
    assert ph["event_us"] == pytest.approx(109.5)
    assert (ph["ctas"], ph["sms"]) == (2, 2)
    assert ph["span_us"] == pytest.approx(106.2) and ph["start_skew_us"] == pytest.approx(0.2)
    assert ph["end_skew_us"] == pytest.approx(6.2) and ph["cta_us"] == pytest.approx(103.0)
    assert ph["prologue_us"] == pytest.approx(0.30, abs=1e-3)  # median of 0.25 and 0.35
    assert ph["first_data_us"] == pytest.approx(2.25, abs=1e-3)  # 2.5 and 2.0 after ready
    assert ph["loads_us"] == pytest.approx((96.75 + 102.65) / 2, abs=1e-3)
    assert ph["drain_us"] == pytest.approx((3.0 + 3.0) / 2, abs=1e-3)  # exit at 100 and 106 us
    assert ph["sm_ghz"] == pytest.approx(1.75)
    with pytest.raises(ValueError, match="no CTA rows"):
        floor.phases(floor.launch_rows([0] * floor.TRACE_EVENTS * 4), 0.1)


def test_the_committed_trace_is_its_cta_rows() -> None:
    """Every launch's phases in call 63's trace follow from its CTAs' rows, and the table's medians
    from the launches."""
    doc = read_json("h200-issue26.tar.xz:call37/trace.json")
    table = read("h200-issue26.tar.xz:call37/trace.txt").decode()
    assert len(doc["shapes"]) == 7
    for shape, v in doc["shapes"].items():
        for launch in v["launches"]:
            assert len(launch["rows"]) in (128, 132)
            assert floor.phases(launch["rows"], launch["event_ms"]) == pytest.approx(
                launch["phases"], rel=1e-12
            )
        for key, value in v["median"].items():
            assert value == pytest.approx(median([launch["phases"][key] for launch in v["launches"]]))
        assert f"| {shape} | {v['median']['event_us']:.1f} | {v['median']['span_us']:.1f} |" in table


def _lower_p50_ratio(bundle: dict[str, Any], fam: str, mode: str) -> float:
    """cuDNN's p50 over ours from the raw per-call samples, the lower of the two layouts."""
    ratios = []
    for r in bundle["results"]:
        p = r["params"]
        if r["suite"] == "perf" and f"{p['b']},{p['h']},{p['sq']},{p['sk']}" == fam and p["mode"] == mode:
            s = r["samples"]
            ratios.append(median(s["baseline:sdpa_cudnn:time_ms"]) / median(s["time_ms"]))
    assert len(ratios) == 2
    return min(ratios)


def test_family_spread_against_the_raw_samples() -> None:
    bundles = [read_json(c) for c in SPREAD_BUNDLES]
    rows = family_spread.spread(bundles, "sdpa_cudnn")
    assert len(rows) == 30 * 3
    for fam, mode in (("32,32,1,8192", "rtna"), ("256,32,128,128", "rtne"), ("2,40,1024,77", "rtz")):
        row = next(r for r in rows if r["family"] == fam and r["mode"] == mode)
        want = [_lower_p50_ratio(b, fam, mode) for b in bundles]
        assert row["ratios"] == pytest.approx(want, rel=1e-9)
        assert row["runs_below_1"] == sum(x < 1 for x in want)
    text = family_spread.table(rows, 3, "sdpa_cudnn")
    assert "below 1.00 in every run: none" in text
    flips = next(line for line in text.splitlines() if line.startswith("below 1.00 in some"))
    assert all(f in flips for f in ("256,32,128,128", "32,32,1,8192", "8,32,1,4096"))


def test_family_spread_refuses_unreadable_bundles(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/h200/family_spread.py"), str(bad)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "cannot read" in out.stderr and str(bad) in out.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH: byte_floor.cu not compiled")
def test_byte_floor_builds_and_refuses_bad_arguments(tmp_path: Path) -> None:
    try:
        lib = floor.build_floor(tmp_path)
    except OSError as exc:  # the CUDA runtime the library links is not loadable here
        pytest.skip(f"byte_floor.so does not load on this machine: {exc}")
    n = lib.byte_floor_configs()
    assert n == 6 and len({lib.byte_floor_name(i) for i in range(n)}) == n
    assert lib.byte_floor_name(n) is None
    launch = lib.byte_floor_launch
    # refused before any CUDA call: an unknown configuration, a size or pointer off 16 bytes
    assert launch(n, 16, 16, 16, 16, 16, 16, 0, 132, None) == -1
    assert launch(0, 16, 16, 16, 16, 24, 16, 0, 132, None) == -1
    assert launch(0, 16, 8, 16, 16, 16, 16, 0, 132, None) == -1
