"""What the ingest tests share: posting a bundle to the real service, the first committed real run,
and a bundle with one value changed."""

from __future__ import annotations

import copy
import json
from typing import Any

import requests
from ingest_server import Service
from real_bundles import real_bundles

from regress.run.upload import RetryPolicy

FAST = RetryPolicy(attempts=2, base_s=0.01, cap_s=0.02, timeout_s=10)


def post(service: Service, body: Any, token: str, **headers: str) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers}
    return requests.post(f"{service.url}/api/v1/runs", data=data, headers=hdrs, timeout=60)


def real() -> dict[str, Any]:
    return real_bundles()[0]


def undrifted() -> dict[str, Any]:
    """A committed real bundle that declares no drift from its pin (some were run with
    --allow-drift; which file sorts first changes as results are committed)."""
    return next(b for b in real_bundles() if not (b["run"].get("host") or {}).get("drift"))


def set_at(bundle: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `bundle` with the value at the dotted `path` ('results.0.name') replaced."""
    out = copy.deepcopy(bundle)
    parts: list[Any] = [int(p) if p.isdigit() else p for p in path.split(".")]
    target = out
    for part in parts[:-1]:
        target = target[part]
    target[parts[-1]] = value
    return out


def nested(n: int) -> str:
    """n arrays, one inside the other."""
    return "[" * n + "]" * n
