"""Detection: pure functions over numbers (no database, no files).

- `pairwise.compare_samples`: one run against its baseline (Mann–Whitney U, effect floor, noise band).
- `changepoint.detect_change_points`: the steps in a series of nightly values.
The DB side lives in regress/analysis.py and regress/gate.py.
"""

from .changepoint import ChangePoint, ChangePointConfig, detect_change_points
from .pairwise import PairwiseConfig, PairwiseResult, compare_samples, historical_noise

__all__ = [
    "ChangePoint",
    "ChangePointConfig",
    "PairwiseConfig",
    "PairwiseResult",
    "compare_samples",
    "detect_change_points",
    "historical_noise",
]
