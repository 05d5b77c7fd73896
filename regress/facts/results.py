"""Plain records that suites produce and the store, bundles and reports consume.

No I/O here: suites yield `CaseResult`s, `regress.store` persists them, `regress.facts.bundle`
serialises them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

Status = Literal["pass", "fail", "error", "timeout", "skip"]
Layout = Literal["bshd", "bhsd"]
Rounding = Literal["rtne", "rtna", "rtz"]

# The one statement of the modes and layouts; every other module imports these.
ROUNDING_MODES: tuple[Rounding, ...] = get_args(Rounding)
LAYOUTS: tuple[Layout, ...] = get_args(Layout)
# Raw-sample names of a perf result: our kernel, and the two arms of an A/B run (regress nightly
# --compare-build; slowdown drills by default), timed in a phase of their own in the same rounds.
PERF_SAMPLE = "time_ms"
AB_BASELINE_SAMPLE = "ab:baseline:time_ms"
AB_CANDIDATE_SAMPLE = "ab:candidate:time_ms"
# The A/B phase times its arms in both listings (candidate first, then baseline first); this metric is
# the index in both arms' samples where the second listing's rounds begin (absent or 0: one listing).
AB_SWAP_METRIC = "ab_swap_at"
# The lifecycle of a detected regression (stored in regressions.state; the CLI offers them).
REGRESSION_STATES: tuple[str, ...] = ("open", "acknowledged", "resolved")
# AITER's how_v3_bf16_cvt numbering, also the C ABI's ra_rounding.
ROUNDING_CODE: dict[str, int] = {"rtne": 0, "rtna": 1, "rtz": 2}
# Which keys a query row sees (docs/serving.md): none, causal aligned top-left (SDPA's is_causal) or
# bottom-right (FlashAttention >= 2.1); the values are the C ABI's ra_mask.
Mask = Literal["none", "causal_top_left", "causal_bottom_right"]
MASKS: tuple[Mask, ...] = get_args(Mask)
MASK_CODE: dict[str, int] = {"none": 0, "causal_top_left": 1, "causal_bottom_right": 2}


def stored_series(values: Iterable[float]) -> list[float]:
    """A raw sample series as the store keeps it: every value a float (an integer past 2**53 reads back
    as the float nearest it). Every writer stores this, and a re-import compares a bundle with it."""
    return [float(v) for v in values]


@dataclass(frozen=True)
class CaseSpec:
    """What was measured. `params` holds the shape (b, h, sq, sk, d), layout, mode and any extras.

    The identity of a case is (kernel, suite, name, params); `key` hashes it so a series is
    (case key, stack digest) across runs.
    """

    suite: str
    name: str
    params: dict[str, Any]
    kernel: str = "attention_fwd"

    @property
    def key(self) -> str:
        blob = json.dumps(
            {"kernel": self.kernel, "suite": self.suite, "name": self.name, "params": self.params},
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:32]


@dataclass
class CaseResult:
    """The outcome of one case in one run.

    metrics: summary numbers (p50_ms, tflops, scaled_ulp_max, ...).
    samples: raw series by name (e.g. "time_ms", "baseline:sdpa_flash:time_ms"), stored verbatim.
    """

    case: CaseSpec
    status: Status
    metrics: dict[str, Any] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    message: str = ""
    device: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.case.kernel,
            "suite": self.case.suite,
            "name": self.case.name,
            "params": self.case.params,
            "case_key": self.case.key,
            "status": self.status,
            "metrics": self.metrics,
            "samples": self.samples,
            "message": self.message,
            "device": self.device,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        spec = CaseSpec(
            suite=data["suite"],
            name=data["name"],
            params=dict(data["params"]),
            kernel=data.get("kernel", "attention_fwd"),
        )
        return cls(
            case=spec,
            status=data["status"],
            metrics=dict(data.get("metrics", {})),
            samples={k: list(v) for k, v in data.get("samples", {}).items()},
            message=data.get("message", ""),
            device=dict(data.get("device", {})),
        )
