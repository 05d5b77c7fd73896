"""What each suite plans to run: coverage of modes and layouts, readable unique ids, full params."""

from __future__ import annotations

from pathlib import Path

import pytest

from regress.facts.results import LAYOUTS, ROUNDING_MODES
from regress.run.suites import SUITES, SuiteContext, get_suite
from regress.run.suites.contract import load_contract, parse_contract


class _Unloaded:
    """Planning never touches the library (the sharder plans with none loaded)."""

    backend = "cuda"
    path = Path("/nonexistent/libregress_attn.so")

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"cases() used library.{name}")


def _ctx(device: str, quick: bool) -> SuiteContext:
    return SuiteContext(library=_Unloaded(), device=device, quick=quick)  # type: ignore[arg-type]


PLANS = [(d, q) for d in ("cpu", "cuda") for q in (False, True)]
PLAN_IDS = [f"{d}-{'quick' if q else 'full'}" for d, q in PLANS]


@pytest.mark.parametrize(("device", "quick"), PLANS, ids=PLAN_IDS)
@pytest.mark.parametrize("suite", sorted(SUITES))
def test_cases_nonempty_unique_and_complete(suite: str, device: str, quick: bool) -> None:
    specs = get_suite(suite).cases(_ctx(device, quick))
    assert specs
    names = [s.name for s in specs]
    assert len(names) == len(set(names)), "case names must be unique within a suite"
    for s in specs:
        assert s.suite == suite
        assert {"b", "h", "sq", "sk", "d", "layout", "mode"} <= set(s.params)
        assert s.params["d"] == 128
        assert s.params["layout"] in LAYOUTS and s.params["mode"] in ROUNDING_MODES
        p = s.params
        assert s.name.startswith(f"b{p['b']}_h{p['h']}_sq{p['sq']}_sk{p['sk']}_{p['layout']}_{p['mode']}")


@pytest.mark.parametrize(("device", "quick"), PLANS, ids=PLAN_IDS)
def test_perf_covers_every_mode_and_layout_per_shape(device: str, quick: bool) -> None:
    specs = get_suite("perf").cases(_ctx(device, quick))
    by_shape: dict[tuple[int, ...], set[tuple[str, str]]] = {}
    v2_modes: dict[str, set[str]] = {}
    for s in specs:
        p = s.params
        if {"hkv", "mask", "seqs"} & set(p):  # ABI v2 families: every mode, bshd (packed for varlen)
            v2_modes.setdefault(s.name.split("_bshd_")[0] + str(p.get("seqs")), set()).add(p["mode"])
            assert p["layout"] == "bshd"
            continue
        by_shape.setdefault((p["b"], p["h"], p["sq"], p["sk"]), set()).add((p["mode"], p["layout"]))
    full = {(m, lay) for m in ROUNDING_MODES for lay in LAYOUTS}
    assert all(combos == full for combos in by_shape.values())
    assert v2_modes and all(modes == set(ROUNDING_MODES) for modes in v2_modes.values())
    assert any(sq != sk for _, _, sq, sk in by_shape), "a cross-attention shape"
    if not quick:
        lengths = {sq for _, _, sq, sk in by_shape if sq == sk}
        # GPU runs the whole H200 table (six lengths) and MoonMath's long ones, so no upper bound.
        assert len(lengths) >= 3
        assert max(lengths) >= 8 * min(lengths), "a very long sequence"
        assert device == "cuda" or len(lengths) <= 5


def test_gpu_plans_include_the_anchor_shapes() -> None:
    perf = {
        (s.params["b"], s.params["h"], s.params["sq"], s.params["sk"])
        for s in get_suite("perf").cases(_ctx("cuda", False))
    }
    assert (2, 40, 1024, 77) in perf and (1, 16, 16384, 16384) in perf
    ulp = {s.params.get("input") for s in get_suite("ulp").cases(_ctx("cuda", False))}
    assert {"realistic", "nan_q", "nan_k", "nan_v", "posinf_k", "neginf_v", "extreme_logits"} <= ulp
    det = get_suite("determinism").cases(_ctx("cuda", False))
    assert {s.params["variant"] for s in det} == {"repeat", "interleaved", "stream", "process"}


def test_gpu_full_perf_has_the_decode_short_query_and_square_families() -> None:
    """Issue 26: decode (Sq = 1), short queries (Sq = 16, 64) and the 4608- and 2048-square shapes
    run in the GPU full nightly; the quick and CPU plans stay as they were (their cost unchanged)."""

    def shapes(device: str, quick: bool) -> set[tuple[int, int, int, int]]:
        return {  # the dense plans (issue 40's v2 families are checked in tests/suites/test_v2_cases.py)
            (s.params["b"], s.params["h"], s.params["sq"], s.params["sk"])
            for s in get_suite("perf").cases(_ctx(device, quick))
            if not {"hkv", "mask", "seqs"} & set(s.params)
        }

    full = shapes("cuda", False)
    assert {sq for _, _, sq, sk in full if sq < 128 and sk >= 2048} == {1, 16, 64}
    assert {(1, 24, 4608, 4608), (16, 32, 2048, 2048), (8, 32, 1, 4096), (4, 32, 64, 8192)} <= full
    for device, quick in (("cuda", True), ("cpu", True), ("cpu", False)):
        assert all(sq >= 64 and sk <= 8192 and sq != 4608 for _, _, sq, sk in shapes(device, quick)), device
    assert shapes("cuda", True) == {(16, 16, 1024, 1024), (2, 16, 8192, 8192), (2, 40, 1024, 77)}


def test_cpu_plans_have_no_second_stream() -> None:
    det = get_suite("determinism").cases(_ctx("cpu", False))
    assert "stream" not in {s.params["variant"] for s in det}


def test_contract_is_packaged_and_versioned() -> None:
    c = load_contract()
    assert c.version == 2
    assert c.scaled_ulp_max == {"rtne": 1.5, "rtna": 1.5, "rtz": 2.0}
    assert c.nonfinite_mismatch_max == 0
    assert c.rounding_mismatch_max == 0
    # the bands of truncation and nearest rounding do not touch
    assert c.rounding_bias_band("rtz")[1] < c.rounding_bias_band("rtne")[0]
    with pytest.raises(ValueError, match="version 1"):
        parse_contract({"version": 1, "scaled_ulp_max": {}, "nonfinite": {}, "determinism": {}})


def test_unknown_suite_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="unknown suite"):
        get_suite("nope")
