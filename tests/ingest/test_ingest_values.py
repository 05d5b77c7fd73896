"""What a bundle's values may be, at the service's door and on `regress import`: integers past
Python's digit limit, whole floats where an integer is stored, NUL in GET parameters, repeated JSON
keys, ?limit= digits, runs from the future or finished before they started, forged case keys,
control characters in short fields, gpu_state times and finite numbers no reader can show, run ids
that look like options and empty suites: each refused with a message naming the field (issue #24).

Every test that touches the store runs on SQLite and PostgreSQL (the `db_url` fixture), against the
real service on 127.0.0.1 or the real CLI.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import requests
from committed import SAMPLE, headline, headline_sample
from ingest_client import post, undrifted
from ingest_server import Service

from regress.cli import main
from regress.facts import bundle as bundle_module
from regress.facts.bundle import BundleError, validate_bundle


@pytest.mark.parametrize(
    "where", ["run.exit_code", "run.summary.n", "results.0.samples.ms.0", "results.0.params.b"]
)
@pytest.mark.parametrize("sign", ["", "-"])
def test_huge_integer_literal_is_400_naming_the_field(service: Service, where: str, sign: str) -> None:
    bundle = undrifted()
    parts: list[Any] = [int(p) if p.isdigit() else p for p in where.split(".")]
    target: Any = bundle
    bundle["results"][0]["samples"]["ms"] = [1.0]
    for part in parts[:-1]:
        target = target.setdefault(part, {}) if isinstance(target, dict) else target[part]
    target[parts[-1]] = "@HUGE@"
    body = json.dumps(bundle).replace('"@HUGE@"', sign + "9" * 5000).encode()
    resp = post(service, body, service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert str(parts[-1]) in resp.json()["error"] and "5000 digits" in resp.json()["error"]


def test_huge_integer_in_a_bundle_file_is_one_line(tmp_path: Any, db_url: str, capsys: Any) -> None:
    path = tmp_path / "huge.json"
    bundle = undrifted()
    bundle["run"]["exit_code"] = "@HUGE@"
    path.write_text(json.dumps(bundle).replace('"@HUGE@"', "1" * 4301))
    assert main(["import", "--db", db_url, str(path)]) != 0
    err = capsys.readouterr().err
    assert "bundle.run.exit_code" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("params.b", 1.0),
        ("params.sq", -0.0),
        ("params.d", 128.0),
        ("run.exit_code", 0.0),
        ("stack.schema_version", 1.0),
    ],
)
def test_whole_float_in_an_integer_column_is_400(service: Service, path: str, value: float) -> None:
    bundle = undrifted()
    if path.startswith("params."):
        bundle["results"][0]["params"][path.split(".")[1]] = value
    else:
        section, field = path.split(".")
        bundle[section][field] = value
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert path.split(".")[-1] in resp.json()["error"]
    assert "must be integer" in resp.json()["error"]


def test_whole_float_import_is_one_line_not_a_traceback(tmp_path: Any, db_url: str, capsys: Any) -> None:
    bundle = undrifted()
    bundle["results"][0]["params"]["b"] = 1.0
    path = tmp_path / "float.json"
    path.write_text(json.dumps(bundle))
    assert main(["import", "--db", db_url, str(path)]) != 0
    err = capsys.readouterr().err
    assert "params.b" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/runs?runner=%00",
        "/api/v1/runs?stack=a%00b",
        "/api/v1/runs?status=%00",
        "/api/v1/runs?before=x%00",
        "/api/v1/runs/abc%00def",
        "/api/v1/series?case=%00x&stack=" + "0" * 64,
        "/api/v1/series?case=x&stack=%00",
    ],
)
def test_nul_in_get_parameters_is_400(service: Service, path: str) -> None:
    resp = requests.get(service.url + path, timeout=30)
    assert resp.status_code == 400, resp.text
    assert "NUL" in resp.json()["error"]


def test_repeated_json_key_is_400_naming_the_object(service: Service) -> None:
    bundle = undrifted()
    text = json.dumps(bundle)
    forged = text.replace('"run": {', '"run": {"id": "aaaaaaaaaaaaaaaaaaaa", ', 1)
    assert forged != text
    resp = post(service, forged.encode(), service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert "bundle.run" in resp.json()["error"] and "'id' twice" in resp.json()["error"]


def test_repeated_key_in_a_file() -> None:
    with pytest.raises(BundleError, match=r"bundle\.results\[0\]\.metrics: names the key 'x' twice"):
        bundle = undrifted()
        bundle["results"][0]["metrics"] = {"x": 1}
        text = json.dumps(bundle).replace('"metrics": {"x": 1}', '"metrics": {"x": 1, "x": 2}')
        validate_bundle(bundle_module.loads_bundle(text))


@pytest.mark.parametrize("limit", ["\uff11\uff12", "\u0661", "1" * 5000, "+5", " 5", "0"])
def test_limit_takes_ascii_digits_only(service: Service, limit: str) -> None:
    resp = requests.get(f"{service.url}/api/v1/runs", params={"limit": limit}, timeout=30)
    assert resp.status_code == 400, resp.text


COMMITTED_BUNDLES = 10  # benchmarks/headline/*.json at the time of writing; fewer means they moved or went


@pytest.mark.parametrize(
    "which",
    ["sample", pytest.param("all", marks=pytest.mark.slow)],  # plain pytest: one bundle of each kind
)
def test_committed_bundles_still_valid(which: str) -> None:
    """Every committed real bundle, whole, still passes the schema; none went missing (a moved folder
    made this pass over zero bundles); and the schema still bites on their real structure."""
    paths = headline_sample() if which == "sample" else headline()
    assert len(paths) >= (len(SAMPLE) if which == "sample" else COMMITTED_BUNDLES), f"only {paths} found"
    bundles = [json.loads(p.read_text()) for p in paths]
    assert {r["suite"] for b in bundles for r in b["results"]} >= {"perf", "ulp", "determinism"}
    for bundle in bundles:
        validate_bundle(bundle_module.loads_bundle(json.dumps(bundle)))
        broken = copy.deepcopy(bundle)
        broken["results"][0]["status"] = "no-such-status"
        with pytest.raises(BundleError):
            validate_bundle(bundle_module.loads_bundle(json.dumps(broken)))


@pytest.mark.parametrize("field", ["started_at", "finished_at"])
def test_a_run_from_the_future_is_400(service: Service, field: str) -> None:
    bundle = undrifted()
    bundle["run"].update(started_at="2026-01-01T00:00:00", finished_at=None)
    bundle["run"][field] = "2999-12-30T00:00:00"
    resp = post(service, bundle, service.token("attacker"))
    assert resp.status_code == 400 and f"bundle.run.{field}" in resp.json()["error"], resp.text
    assert "later than the clock" in resp.json()["error"]


def test_finished_before_started_is_400(service: Service) -> None:
    bundle = undrifted()
    bundle["run"].update(started_at="2026-11-02T00:00:00", finished_at="2026-11-01T00:00:00")
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400 and "bundle.run.finished_at" in resp.json()["error"], resp.text


def test_a_forged_case_key_is_400(service: Service) -> None:
    bundle = undrifted()
    bundle["results"][0]["case_key"] = "0" * 32
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400 and "bundle.results[0].case_key" in resp.json()["error"], resp.text


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("results.0.name", "a\nb"),
        ("run.trigger", "x\tfake"),
        ("run.backend", "\x1b[2J"),
        ("stack.name", "\x7f"),
    ],
)
def test_control_characters_in_short_fields_are_400(service: Service, path: str, value: str) -> None:
    bundle = undrifted()
    section, *rest = path.split(".")
    target: Any = bundle[section]
    for part in rest[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    target[rest[-1]] = value
    target.pop("case_key", None)
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert rest[-1] in resp.json()["error"] and "control character" in resp.json()["error"]


def test_messages_may_hold_newlines_and_tabs(service: Service) -> None:
    bundle = undrifted()
    bundle["run"]["message"] = "line one\n\tline two\r\n\x1b[0m"  # a log: readers escape it
    assert post(service, bundle, service.token("h200-01")).status_code == 201


@pytest.mark.parametrize(
    ("where", "value"),
    [("before", 1e300), ("before", -1e12), ("after", "x"), ("workers.worker0.before", 4e10)],
)
def test_gpu_state_time_unix_out_of_range_is_400(service: Service, where: str, value: Any) -> None:
    bundle = undrifted()
    target = bundle["run"]["gpu_state"]
    for part in where.split("."):
        target = target.setdefault(part, {})
    target["time_unix"] = value
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert f"bundle.run.gpu_state.{where}.time_unix" in resp.json()["error"]


@pytest.mark.parametrize(
    ("path", "value"),
    [("metrics.scaled_ulp_max", 1.7e308), ("metrics.p50_ms", -1e101), ("samples.time_ms", [1.0, 1e308])],
)
def test_huge_finite_numbers_are_400(service: Service, path: str, value: Any) -> None:
    bundle = undrifted()
    section, key = path.split(".")
    bundle["results"][0][section][key] = value
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert key in resp.json()["error"] and "1e+100" in resp.json()["error"]


@pytest.mark.parametrize("run_id", ["--------", "-abcdefgh", "--db=x-------"])
def test_a_run_id_must_not_look_like_an_option(service: Service, run_id: str) -> None:
    bundle = undrifted()
    bundle["run"]["id"] = run_id
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400 and "bundle.run.id" in resp.json()["error"], resp.text


def test_empty_suites_is_refused_before_anything_is_stored(tmp_path: Any, capsys: Any) -> None:
    db = tmp_path / "r.db"
    assert main(["nightly", "--backend", "cpu", "--suites", "", "--db", f"sqlite:///{db}"]) == 2
    assert "no suites" in capsys.readouterr().err
    assert not db.exists()
