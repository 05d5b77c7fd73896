"""The A/B verdict (both builds in the same rounds) on recorded real CPU samples and on controlled noise.

The recorded runs (data/ab_cpu_recorded.json) are real quick perf nights of this 2-core VM under
load: two clean A/B runs (the clean build against itself) and a 10 % slowdown drill against the
clean build. The samples are fixed, so each test checks the same numbers every time: no timing is
taken here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from regress.detect.paired import (
    ABConfig,
    ABInput,
    block_log_ratios,
    judge_ab,
    listing_logs,
    median_se,
    paired_ratio,
    swap_point,
)

RECORDED = json.loads((Path(__file__).parent / "data" / "ab_cpu_recorded.json").read_text())


def _inputs(label: str) -> list[ABInput]:
    return [
        ABInput(c["case"], c["baseline"], c["candidate"], f"perf/{c['case']}")
        for c in RECORDED["runs"][label]["cases"]
    ]


@pytest.mark.parametrize("label", ["clean-1", "clean-2"])
def test_recorded_clean_ab_runs_pass_with_their_power(label: str) -> None:
    v = judge_ab(_inputs(label))
    assert v.verdict == "pass", v.reasons
    assert all(c.mde is not None and c.mde <= 0.15 for c in v.cases)
    assert v.aggregate["mde"] is not None and v.aggregate["mde"] <= 0.10
    assert "no perf case slower" in v.reasons[-1]


def test_recorded_10_percent_drill_is_a_regression_naming_its_cases() -> None:
    v = judge_ab(_inputs("slowdown-10"))
    assert v.verdict == "regression"
    assert v.aggregate["verdict"] == "slower" and 1.07 < v.aggregate["geomean_ratio"] < 1.13
    assert len(v.regressions) == len(v.cases) == 18
    assert "systematic slowdown" in v.reasons[0]


def test_blocks_pair_abba_rounds_and_cancel_a_position_bias() -> None:
    # The second call of a round is 10 % faster (warm inputs); A is first in even rounds.
    a = [1.0 if i % 2 == 0 else 0.9 for i in range(40)]
    b = [0.9 if i % 2 == 0 else 1.0 for i in range(40)]
    d = block_log_ratios(a, b)
    assert len(d) == 20 and all(abs(x) < 1e-12 for x in d)
    assert judge_ab([ABInput(f"k{i}", a, b) for i in range(8)]).verdict == "pass"
    per_round = [math.log(y / x) for x, y in zip(a, b, strict=True)]
    assert max(abs(x) for x in per_round) > 0.1  # unpaired by block, the bias would be +-10 %


@pytest.mark.parametrize("label", ["clean-1", "slowdown-10"])
def test_paired_ratio_is_the_statistic_the_verdict_judges(label: str) -> None:
    # The benchmark scripts report paired_ratio; the gate judges _case: one statistic, both places.
    for c, j in zip(_inputs(label), judge_ab(_inputs(label)).cases, strict=True):
        ratio, p = paired_ratio(c.baseline, c.candidate)
        assert (ratio, p) == (j.ratio, j.p_value)


def test_paired_ratio_of_identical_arms_and_of_no_blocks() -> None:
    a = [1.0, 1.1, 0.9, 1.2]
    assert paired_ratio(a, a) == (1.0, 1.0)
    ratio, p = paired_ratio([math.nan] * 4, a)
    assert math.isnan(ratio) and math.isnan(p)


def _control_rows() -> dict[tuple[tuple[int, ...], str, str], dict[str, list[float]]]:
    """Issue 40's A/A control on the H200 (call 4): per (shape, mode, pair) the two arms' samples."""
    import gzip
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kit"))
    from committed import read

    blob = json.loads(gzip.decompress(read("h200-issue40-close.tar.xz:call4/ab_control.json.gz")))
    return {(tuple(r["shape"]), r["mode"], r["pair"]): r["samples_ms"] for r in blob["rows"]}


def test_both_listings_cancel_the_h200_listing_effect_that_one_listing_flags() -> None:
    """Real H200 samples: 4cc9352's library (old) against this tree's (new), byte-identical machine
    code. One listing reads the arm listed second 1.6-2.0 % slower at (2, 40, 1024, 77), p far below
    the gate's alpha, so one listing flags whichever build is listed second; both listings (the perf
    suite's A/B since issue 40's close) give the builds' difference, within 0.25 % (as the notes
    say), and no flag."""
    rows = _control_rows()
    worst = 0.0
    for (shape, mode, pair), first_half in rows.items():
        if pair != "new:old":
            continue
        second_half = rows[(shape, mode, "old:new")]
        n = len(first_half["new"])
        base = first_half["old"] + second_half["old"]
        cand = first_half["new"] + second_half["new"]
        both = judge_ab([ABInput("k", base, cand, swap_at=n)]).cases[0]
        assert both.status == "same", (shape, mode, both.ratio)
        worst = max(worst, abs(both.ratio - 1))
        assert paired_ratio(base, cand, swap_at=n)[0] == both.ratio
        if shape == (2, 40, 1024, 77):  # one listing: the listed-second arm flagged either way
            one = judge_ab([ABInput("k", first_half["new"], first_half["old"])]).cases[0]
            other = judge_ab([ABInput("k", second_half["old"], second_half["new"])]).cases[0]
            assert one.p_value < 1e-6 and other.p_value < 1e-6 and one.ratio > 1.015 and other.ratio > 1.015
    notes = " ".join((Path(__file__).resolve().parents[2] / "docs" / "perf-notes.md").read_text().split())
    assert f"differs by at most {100 * worst:.2f} %" in notes


def test_both_listings_still_catch_a_slowdown_under_a_listing_effect() -> None:
    """A 3 % slower candidate, with the arm in the second listing role 2 % slower on top: one pooled
    median would read 1 % or 5 % by the halves' balance; the two listings' mean reads the 3 %."""
    rng = np.random.default_rng(3)
    cases = []
    for i in range(12):
        a, b = _arm(rng, 80, 1.0 + i, False), _arm(rng, 80, (1.0 + i) * 1.03, False)
        b[:40] *= 1.02  # candidate listed second in the first half
        a[40:] *= 1.02  # baseline listed second in the second half
        cases.append(ABInput(f"k{i}", list(a), list(b), swap_at=40))
    v = judge_ab(cases)
    assert v.verdict == "regression" and 1.025 < v.aggregate["geomean_ratio"] < 1.035


@given(
    st.integers(min_value=-5, max_value=90),
    st.integers(min_value=0, max_value=80),
    st.sampled_from([1, 2]),
)
def test_a_stored_swap_point_of_any_value_is_read_safely(swap_at: int, n: int, block: int) -> None:
    """A swap point that is not an even round inside the samples (a hand-edited or foreign row) is
    read as one listing; every round is paired at most once either way."""
    for foreign in (None, "40", 40.0, True, [40], {"at": 40}):
        assert swap_point(foreign) == 0
    assert swap_point(swap_at) == swap_at
    a = [1.0 + 0.01 * i for i in range(n)]
    halves = listing_logs(a, a[::-1], block, swap_at)
    assert 1 <= len(halves) <= 2 and sum(len(h) for h in halves) <= n // block
    if len(halves) == 2:
        assert 0 < swap_at < n and swap_at % block == 0


def _arm(rng: np.random.Generator, n: int, level: float, loaded: bool) -> np.ndarray:
    x = level * (1 + 0.01 * np.abs(rng.standard_normal(n)))
    if loaded:  # a share of the calls disturbed x1.5-3 (cache pollution after a preemption)
        x = x * np.where(rng.random(n) < 0.25, rng.uniform(1.5, 3.0, n), 1.0)
    return x


def _pair(seed: int, slowdown: float, loaded: bool, n_cases: int = 18) -> list[ABInput]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_cases):
        drift = np.exp(0.05 * np.cumsum(rng.standard_normal(40)) / 6)  # the machine drifts: both arms
        a = _arm(rng, 40, 1.0 + i, loaded) * drift
        b = _arm(rng, 40, (1.0 + i) * (1 + slowdown), loaded) * drift
        out.append(ABInput(f"k{i}", list(a), list(b), f"perf/c{i}"))
    return out


def test_calm_clean_pairs_pass_and_drills_from_2_percent_are_caught() -> None:
    clean = [judge_ab(_pair(s, 0.0, False)).verdict for s in range(20)]
    assert "regression" not in clean and clean.count("pass") >= 18, clean
    for pct in (0.02, 0.10, 0.30):
        got = [judge_ab(_pair(100 + s, pct, False)).verdict for s in range(10)]
        assert got == ["regression"] * 10, (pct, got)


@pytest.mark.slow  # a simulated calibration (1.4 s CPU)
def test_heavily_disturbed_clean_pairs_never_alarm_and_big_drills_are_caught() -> None:
    """A quarter of the calls disturbed x1.5-3: the paired blocks scatter, so a clean pair may be
    undecided (its MDE says so), never a regression; 10 % and 30 % drills still are."""
    clean = [judge_ab(_pair(s, 0.0, True)).verdict for s in range(20)]
    assert "regression" not in clean
    for pct in (0.10, 0.30):
        got = [judge_ab(_pair(100 + s, pct, True)).verdict for s in range(10)]
        assert got == ["regression"] * 10, (pct, got)


def test_too_few_rounds_are_undecided_and_say_how_many() -> None:
    v = judge_ab([ABInput(f"k{i}", [1.0] * 8, [1.0] * 8) for i in range(8)])
    assert v.verdict == "undecided"
    assert all("at least 20 rounds" in c.advice for c in v.cases)


def test_median_se_shrinks_with_more_blocks() -> None:
    rng = np.random.default_rng(0)
    few, many = median_se(list(rng.standard_normal(20))), median_se(list(rng.standard_normal(320)))
    assert few is not None and many is not None and many < few / 2.5
    assert median_se([0.1, 0.2]) is None


def test_the_floor_is_a_config() -> None:
    v = judge_ab(_pair(7, 0.015, False), ABConfig(min_effect=0.01, aggregate_min_effect=0.005))
    assert v.verdict == "regression"
