"""The stack's keys and digest (DESIGN §4), pure: which keys break history and how the digest is made.

Kept apart from regress/machine/stack.py, which probes the machine and reads pins, so that the store, the site
and the demo can name the keys and make a digest without importing the probing (issue 25).
Bump SCHEMA_VERSION whenever a key is added, removed or re-derived: the digest changes with it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1
HASHED_KEYS = (
    "backend",
    "gpu_arch",
    "gpu_product",
    "driver",
    "firmware",
    "toolkit",
    "compiler",
    "build_flags",
)
# Checked against a pin, not hashed. Not the OS kernel's build string: it decides no number (the
# driver, firmware, toolkit and compiler that do are hashed), yet it differs on every machine, so a
# pin naming it refused every machine but its author's (issue 42: `stack check cpu-local` exit 2,
# a plain nightly's bundle 409 at its own import). It is a host fact now (run.host.os_kernel).
PINNED_KEYS = ("torch", "baseline_library", "python")
# Keys that bundles written before a key was retired still carry: accepted at the door, never compared.
RETIRED_KEYS = ("os_kernel",)


@dataclass
class Fingerprint:
    keys: dict[str, str]  # HASHED_KEYS + PINNED_KEYS
    diagnostics: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    @property
    def digest(self) -> str:
        return stack_digest({k: self.keys[k] for k in HASHED_KEYS}, self.schema_version)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "digest": self.digest,
            "keys": self.keys,
            "hashed_keys": list(HASHED_KEYS),
            "diagnostics": self.diagnostics,
        }


def drifted_keys(expected: Mapping[str, Any], live: Mapping[str, Any]) -> list[str]:
    """THE drift rule, one place for `stack check`, `nightly --stack`, a plain nightly and both
    imports (the service's and `regress import`): the hashed and pinned keys whose live value is
    not the pin's. Anything else a pin or a bundle carries is never compared."""
    return [k for k in (*HASHED_KEYS, *PINNED_KEYS) if str(expected.get(k, "")) != str(live.get(k, ""))]


def stack_digest(hashed: dict[str, str], schema_version: int = SCHEMA_VERSION) -> str:
    blob = json.dumps({"schema_version": schema_version, **hashed}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
