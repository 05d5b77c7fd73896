"""regress.facts.stats: the shared formulas, and that no copy of them grows back elsewhere."""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from regress.detect.paired import median_se
from regress.detect.power import quantile_se
from regress.facts import stats

ROOT = Path(__file__).resolve().parents[1]
finite = st.floats(-1e6, 1e6, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=40), st.floats(0, 100))
def test_percentile_of_a_list_is_numpys(values: list[float], q: float) -> None:
    assert stats.percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-6)
    assert stats.percentile(np.asarray(values), q) == float(np.percentile(values, q))


@given(st.lists(finite, min_size=0, max_size=41))
def test_the_median_is_numpys_and_the_upper_median_an_observed_value(values: list[float]) -> None:
    if not values:
        assert math.isnan(stats.median(values)) and math.isnan(stats.upper_median(values))
        return
    assert stats.median(values) == float(np.median(values))
    assert stats.median(np.asarray(values)) == float(np.median(values))
    upper = stats.upper_median(values)
    assert upper in values
    assert sum(v < upper for v in values) <= len(values) // 2 <= sum(v <= upper for v in values) - 1


def test_geomean_keeps_positive_finite_values_only() -> None:
    assert stats.geomean([2.0, 8.0, 0.0, -1.0, math.inf, math.nan]) == pytest.approx(4.0)
    assert stats.geomean([]) is None and stats.geomean([0.0]) is None


def test_the_two_sigmas_are_gaussian_consistent() -> None:
    x = np.random.default_rng(0).normal(0.0, 2.0, 200_000)
    assert stats.mad_sigma(x) == pytest.approx(2.0, rel=0.01)
    assert stats.successive_sigma(x) == pytest.approx(2.0, rel=0.01)
    # A step moves the successive-difference sigma by one difference only; the MAD sees two levels.
    stepped = np.concatenate([x[:1000], x[1000:2000] + 50.0])
    assert stats.successive_sigma(stepped) == pytest.approx(stats.successive_sigma(x[:2000]), rel=0.05)
    assert stats.mad_sigma(stepped) > 10 * stats.mad_sigma(x[:2000])
    assert stats.successive_sigma([1.0]) == 0.0 and stats.mad_sigma([]) == 0.0


@given(st.lists(st.floats(1e-3, 1e3), min_size=0, max_size=60), st.sampled_from([0.25, 0.5, 0.9]))
def test_the_order_statistic_se_is_the_one_behind_both_callers(values: list[float], q: float) -> None:
    logs = [math.log(v) for v in values]
    assert quantile_se(values, q) == stats.order_statistic_se(logs, q)
    assert median_se(logs) == stats.order_statistic_se(logs, 0.5)
    if len(values) < 4:
        assert stats.order_statistic_se(logs, q) is None


def test_clip_outliers_bounds_one_night_to_its_neighbours() -> None:
    x = np.array([1.0, 1.0, 9.0, 1.0, 1.0])
    assert list(stats.clip_outliers(x, sigma=0.1, k=3.0)) == pytest.approx([1.0, 1.0, 1.3, 1.0, 1.0])
    assert list(stats.clip_outliers(np.array([5.0, 1.0]), 0.1, 3.0)) == [5.0, 1.0]


def test_stats_loads_no_numpy_until_asked() -> None:
    code = (
        "import sys, regress.facts.stats as s; s.percentile([1.0, 2.0], 50); s.geomean([1.0]); "
        "print('numpy' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert done.stdout.strip() == "False"


def test_no_copy_of_the_robust_sigma_constant_outside_stats() -> None:
    """1.4826 (the MAD-to-sigma factor) in code, not prose, anywhere but regress/facts/stats.py."""
    found = []
    for path in [*ROOT.joinpath("regress").rglob("*.py"), *ROOT.joinpath("benchmarks").rglob("*.py")]:
        if path == ROOT / "regress" / "facts" / "stats.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, float)
                and abs(node.value - 1.4826) < 1e-4
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"use regress.facts.stats.mad_sigma / successive_sigma: {found}"


def _loose_median(node: ast.AST) -> str | None:
    """A median or quantile computed outside regress.facts.stats: np/numpy/statistics .median, .quantile,
    .percentile (a vectorised call with axis= is not one value, and stays), or sorted(x)[len(x) // 2]."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        owner = node.func.value
        if (
            isinstance(owner, ast.Name)
            and owner.id in {"np", "numpy", "statistics"}
            and node.func.attr in {"median", "quantile", "percentile", "median_low", "median_high"}
            and not any(k.arg == "axis" for k in node.keywords)
        ):
            return f"{owner.id}.{node.func.attr}"
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.BinOp):
        op = node.slice
        if (
            isinstance(op.op, ast.FloorDiv)
            and isinstance(op.right, ast.Constant)
            and op.right.value == 2
            and isinstance(op.left, ast.Call)
            and isinstance(op.left.func, ast.Name)
            and op.left.func.id == "len"
        ):
            return "x[len(x) // 2]"
    return None


def test_the_loose_median_check_sees_each_form() -> None:
    code = "np.median(x)\nstatistics.median(x)\nnp.quantile(x, 0.5)\nsorted(x)[len(x) // 2]\n"
    code += "np.median(x, axis=1)\n"  # vectorised: allowed
    found = [f for node in ast.walk(ast.parse(code)) if (f := _loose_median(node))]
    assert sorted(found) == ["np.median", "np.quantile", "statistics.median", "x[len(x) // 2]"]


def test_no_median_or_quantile_outside_stats() -> None:
    """Medians and quantiles go through regress.facts.stats (median, upper_median, percentile), so one
    definition holds in every layer and benchmark."""
    found = []
    for path in [*ROOT.joinpath("regress").rglob("*.py"), *ROOT.joinpath("benchmarks").rglob("*.py")]:
        if path == ROOT / "regress" / "facts" / "stats.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if what := _loose_median(node):
                found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)} {what}")
    assert not found, f"use regress.facts.stats: {found}"
