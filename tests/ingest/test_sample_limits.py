"""Issue 41 item 5: samples per result and per run were unbounded (a 28.6 MiB upload took 1.0 GB of
server memory) and one GET of such a run built it whole (0.77 GB). Both doors now refuse a bundle
over MAX_SAMPLES_PER_RESULT / MAX_SAMPLES_PER_RUN with one line naming the limit, and a GET page
holds at most SAMPLES_PAGE_BYTES of stored samples (the rest is behind its Link header)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import requests
from ingest_bundles import make_bundle
from ingest_client import post
from ingest_server import Service

from regress.cli import main
from regress.facts.bundle import MAX_SAMPLES_PER_RESULT, MAX_SAMPLES_PER_RUN, BundleError, validate_bundle
from regress.server import runs as runs_module


def _with_samples(per_result: int, results: int) -> dict[str, Any]:
    bundle = make_bundle()
    template = bundle["results"][0]
    out = []
    for i in range(results):
        res = copy.deepcopy(template)
        res.pop("case_key", None)
        res["name"] = f"s{i:05d}"
        res["samples"] = {"time_ms": [1.0 + (j % 97) / 100 for j in range(per_result)]}
        out.append(res)
    bundle["results"] = out
    return bundle


def test_samples_per_result_over_the_limit_are_400(service: Service) -> None:
    bundle = _with_samples(MAX_SAMPLES_PER_RESULT + 1, 1)
    resp = post(service, bundle, service.token("r1"))
    assert resp.status_code == 400
    assert f"more than the limit of {MAX_SAMPLES_PER_RESULT:,} per result" in resp.json()["error"]


def test_samples_per_run_over_the_limit_are_refused_at_both_doors(tmp_path: Path, db_url: str) -> None:
    per = MAX_SAMPLES_PER_RESULT
    bundle = _with_samples(per, MAX_SAMPLES_PER_RUN // per + 1)
    with pytest.raises(BundleError, match=f"limit of {MAX_SAMPLES_PER_RUN:,} samples per run"):
        validate_bundle(bundle)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(bundle))
    assert main(["import", str(path), "--db", db_url]) == 2


def test_a_get_page_is_bounded_by_its_samples(
    service: Service, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bundle = _with_samples(5000, 12)  # ~25 KiB of stored samples per result
    assert post(service, bundle, service.token("r1")).status_code == 201
    run_id = bundle["run"]["id"]
    monkeypatch.setattr(runs_module, "SAMPLES_PAGE_BYTES", 60_000)  # about two results a page
    url: str | None = f"{service.url}/api/v1/runs/{run_id}"
    pages: list[int] = []
    names: list[str] = []
    while url and len(pages) < 20:  # bounded: 12 results cannot need more than 12 pages
        resp = requests.get(url, timeout=30)
        assert resp.status_code == 200
        got = resp.json()["results"]
        pages.append(len(got))
        names += [r["name"] for r in got]
        assert sum(len(json.dumps(r["samples"])) for r in got) < 60_000 * 2  # one result may exceed
        link = resp.headers.get("Link")
        url = service.url + link.split(">")[0].lstrip("<") if link else None
    assert names == [f"s{i:05d}" for i in range(12)]
    assert max(pages) <= 3 and len(pages) >= 4
    lean = requests.get(f"{service.url}/api/v1/runs/{run_id}?samples=false", timeout=30).json()
    assert len(lean["results"]) == 12 and all(r["samples"] == {} for r in lean["results"])
