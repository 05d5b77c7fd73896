"""The versioned numerics contract (regress/contract.toml), loaded from package data."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

SUPPORTED_VERSIONS = (1,)


@dataclass(frozen=True)
class Contract:
    version: int
    scaled_ulp_max: dict[str, float]
    nonfinite_mismatch_max: int
    distinct_hashes_max: int

    def scaled_ulp_limit(self, mode: str) -> float:
        return self.scaled_ulp_max[mode]


def parse_contract(data: dict[str, Any]) -> Contract:
    version = int(data["version"])
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"numerics contract version {version} is not supported ({SUPPORTED_VERSIONS})")
    return Contract(
        version=version,
        scaled_ulp_max={str(k): float(v) for k, v in data["scaled_ulp_max"].items()},
        nonfinite_mismatch_max=int(data["nonfinite"]["mismatch_max"]),
        distinct_hashes_max=int(data["determinism"]["distinct_hashes_max"]),
    )


@cache
def load_contract() -> Contract:
    text = resources.files("regress").joinpath("contract.toml").read_text(encoding="utf-8")
    return parse_contract(tomllib.loads(text))
