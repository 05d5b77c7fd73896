"""Detection: pure functions over numbers (no database, no files).

- `pairwise.compare_samples`: one run against its baseline (Mann–Whitney U, effect floor, noise band).
- `changepoint.detect_change_points`: the steps in a series of nightly values.
- `power.minimum_detectable_effect`: what a pairwise comparison could have caught (its MDE).
- `verdict.judge`: the rule over all perf cases of a pair of runs (gate and nightly analysis).
The DB side lives in regress/judge/analysis.py and regress/judge/gate/.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .changepoint import ChangePoint, detect_change_points
    from .config import ChangePointConfig
    from .pairwise import PairwiseConfig, PairwiseResult, compare_samples, historical_noise
    from .power import Power, minimum_detectable_effect

# Loaded on first use (PEP 562): `regress detect` needs only changepoint (numpy), and scipy.stats,
# which pairwise and power use, costs about a second of start-up (issue 11).
_WHERE = {
    "ChangePoint": "changepoint",
    "ChangePointConfig": "config",
    "detect_change_points": "changepoint",
    "PairwiseConfig": "pairwise",
    "PairwiseResult": "pairwise",
    "compare_samples": "pairwise",
    "historical_noise": "pairwise",
    "Power": "power",
    "minimum_detectable_effect": "power",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ChangePoint",
    "ChangePointConfig",
    "PairwiseConfig",
    "PairwiseResult",
    "Power",
    "compare_samples",
    "detect_change_points",
    "historical_noise",
    "minimum_detectable_effect",
]
