"""Detection: pure functions over numbers (no database, no files).

- `pairwise.compare_samples`: one run against its baseline (Mann–Whitney U, effect floor, noise band).
- `changepoint.detect_change_points`: the steps in a series of nightly values.
- `power.minimum_detectable_effect`: what a pairwise comparison could have caught (its MDE).
- `verdict.judge`: the rule over all perf cases of a pair of runs (gate and nightly analysis).
The DB side lives in regress/analysis.py and regress/gate/.
"""

from .changepoint import ChangePoint, ChangePointConfig, detect_change_points
from .pairwise import PairwiseConfig, PairwiseResult, compare_samples, historical_noise
from .power import Power, minimum_detectable_effect

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
