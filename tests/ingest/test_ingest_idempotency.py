"""Idempotent upload compares the whole canonical bundle: any change under a stored run id is 409
naming the path, equal content written differently is the same run, and parallel uploads of one
bundle store it once (issue #24). SQLite and PostgreSQL, against the real service on 127.0.0.1.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from ingest_client import post, undrifted
from ingest_server import Service
from real_bundles import real_bundles

CHANGES = [
    ("run.is_drill", True),
    ("run.started_at", "2026-11-01T00:00:00"),
    ("run.kernel_commit", "f" * 40),
    ("run.summary", {"failed": 0, "forged": 1}),
    ("run.message", "changed"),
    ("run.trigger", "forged"),
    ("run.host", {"forged": 1}),
    ("build.flags", ["-O0"]),
    ("results.0.name", "renamed"),
    ("results.0.device", {"index": 7}),
    ("results.0.message", "changed"),
    ("results.0.metrics.extra", 1.0),
]


@pytest.mark.parametrize(("path", "value"), CHANGES, ids=[p for p, _ in CHANGES])
def test_any_change_under_a_stored_id_is_409_naming_the_path(service: Service, path: str, value: Any) -> None:
    token = service.token("h200-01")
    original = undrifted()
    assert post(service, original, token).status_code == 201
    changed = copy.deepcopy(original)
    parts: list[Any] = [int(p) if p.isdigit() else p for p in path.split(".")]
    target: Any = changed
    for part in parts[:-1]:
        target = target[part]
    target[parts[-1]] = value
    changed["results"][0].pop("case_key", None)  # derived from the name: checked on its own (18)
    resp = post(service, changed, token)
    assert resp.status_code == 409, resp.text
    assert "bundle." + path.split(".")[0] in resp.json()["error"]
    assert post(service, original, token).status_code == 200  # the same again: identical


@pytest.mark.slow  # 20 threads x every committed bundle
def test_twenty_parallel_uploads_of_each_committed_bundle_store_one_run(service: Service) -> None:
    """The race of docs/reliability.md: 20 threads send one bundle at once, for every committed
    real bundle. One stores it (201), the others are told it is identical (200). A run that
    declared drift from its pin got 1 x 201 and 19 x 409 (its stored stack holds the pin's keys)."""
    import threading

    token = service.token("h200-01")
    for bundle in real_bundles():
        body = json.dumps(bundle).encode()
        barrier = threading.Barrier(20)
        codes: list[int] = []

        def send(body: bytes = body, barrier: threading.Barrier = barrier, codes: list[int] = codes) -> None:
            barrier.wait(timeout=60)
            codes.append(post(service, body, token).status_code)

        threads = [threading.Thread(target=send) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert sorted(codes) == [200] * 19 + [201], (bundle["run"]["id"], sorted(codes))


def test_equal_content_written_differently_is_identical(service: Service) -> None:
    token = service.token("h200-01")
    original = undrifted()
    assert post(service, original, token).status_code == 201
    same = copy.deepcopy(original)
    same["results"].reverse()  # order is not content
    same["run"]["started_at"] = original["run"]["started_at"] + "+00:00"  # the same instant
    assert post(service, same, token).status_code == 200
